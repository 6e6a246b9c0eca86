// The CORS answers of a route with cors: the preflight's headers, and those
// an allowed origin's response carries.
#include <catch2/catch.hpp>

#include "middleware/access/cors.hpp"

namespace sluice {
namespace {

std::string cors_header(const HeaderList& headers, std::string_view name) {
  std::string found = "<absent>";
  int count = 0;
  for (const auto& [n, v] : headers) {
    if (n == name) {
      found = v;
      ++count;
    }
  }
  return count > 1 ? "<twice>" : found;
}

CorsConfig named_origins() {
  CorsConfig cors;
  cors.enabled = true;
  cors.origins = {"https://app.example.com"};
  cors.allow_methods = "GET, POST";
  cors.expose_headers = "RateLimit, Retry-After";
  return cors;
}

}  // namespace

TEST_CASE("cors: what a preflight is", "[cors]") {
  CHECK(is_cors_preflight("OPTIONS", true, true));
  CHECK_FALSE(is_cors_preflight("OPTIONS", true, false));  // a plain OPTIONS goes upstream
  CHECK_FALSE(is_cors_preflight("OPTIONS", false, true));
  CHECK_FALSE(is_cors_preflight("GET", true, true));
}

TEST_CASE("cors: a preflight for a named origin", "[cors]") {
  CorsConfig cors = named_origins();
  const HeaderList h = cors_preflight_headers(cors, "https://app.example.com", "content-type, x-api-key");
  CHECK(cors_header(h, "Access-Control-Allow-Origin") == "https://app.example.com");
  CHECK(cors_header(h, "Vary") == "Origin, Access-Control-Request-Method, Access-Control-Request-Headers");
  CHECK(cors_header(h, "Access-Control-Allow-Methods") == "GET, POST");
  CHECK(cors_header(h, "Access-Control-Allow-Headers") == "content-type, x-api-key");  // echoed
  CHECK(cors_header(h, "Access-Control-Max-Age") == "<absent>");
  CHECK(cors_header(h, "Access-Control-Allow-Credentials") == "<absent>");
  // Something that is not a list of names is not echoed.
  CHECK(cors_header(cors_preflight_headers(cors, "https://app.example.com", "a\r\nb"),
                    "Access-Control-Allow-Headers") == "<absent>");
  cors.allow_headers = "Content-Type";
  cors.allow_credentials = true;
  cors.max_age = 600;
  const HeaderList listed = cors_preflight_headers(cors, "https://app.example.com", "x-other");
  CHECK(cors_header(listed, "Access-Control-Allow-Headers") == "Content-Type");
  CHECK(cors_header(listed, "Access-Control-Allow-Credentials") == "true");
  CHECK(cors_header(listed, "Access-Control-Max-Age") == "600");
}

TEST_CASE("cors: any origin answers \"*\" unless credentials are allowed", "[cors]") {
  CorsConfig cors = named_origins();
  cors.any_origin = true;
  HeaderList h;
  append_cors_response_headers(cors, "https://x.test", h);
  CHECK(cors_header(h, "Access-Control-Allow-Origin") == "*");
  CHECK(cors_header(h, "Vary") == "<absent>");
  CHECK(cors_header(h, "Access-Control-Expose-Headers") == "RateLimit, Retry-After");
  const HeaderList pre = cors_preflight_headers(cors, "https://x.test", std::nullopt);
  CHECK(cors_header(pre, "Access-Control-Allow-Origin") == "*");
  CHECK(cors_header(pre, "Vary") == "Access-Control-Request-Method, Access-Control-Request-Headers");
}

TEST_CASE("cors: an allowed origin's response names it and varies by Origin", "[cors]") {
  const CorsConfig cors = named_origins();
  HeaderList h;
  append_cors_response_headers(cors, "https://app.example.com", h);
  CHECK(cors_header(h, "Access-Control-Allow-Origin") == "https://app.example.com");
  CHECK(cors_header(h, "Vary") == "Origin");
  CHECK(cors_header(h, "Access-Control-Expose-Headers") == "RateLimit, Retry-After");
}

}  // namespace sluice
