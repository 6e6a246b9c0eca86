#include "middleware/access/cors.hpp"

#include "common/ascii.hpp"

namespace sluice {
namespace {

bool token_char(char c) {
  return ascii::is_alpha(c) || ascii::is_digit(c) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// "a, b,c": header names separated by commas and spaces, nothing else.
bool is_name_list(std::string_view text) {
  if (text.empty() || text.size() > 1024) return false;
  for (const char c : text) {
    if (!token_char(c) && c != ',' && c != ' ' && c != '\t') return false;
  }
  return true;
}

// "*" answers every page alike; a named origin makes the answer vary by
// Origin (one Vary line: a reply's later line of a name replaces an earlier).
void add_origin(const CorsConfig& cors, std::string_view origin, std::string_view vary,
                HeaderList& out) {
  if (cors.any_origin && !cors.allow_credentials) {
    out.emplace_back("Access-Control-Allow-Origin", "*");
    if (!vary.empty()) out.emplace_back("Vary", std::string(vary));
    return;
  }
  out.emplace_back("Access-Control-Allow-Origin", std::string(origin));
  out.emplace_back("Vary", vary.empty() ? std::string("Origin") : "Origin, " + std::string(vary));
  if (cors.allow_credentials) out.emplace_back("Access-Control-Allow-Credentials", "true");
}

}  // namespace

bool is_cors_preflight(std::string_view method, bool has_origin, bool has_request_method) {
  return method == "OPTIONS" && has_origin && has_request_method;
}

HeaderList cors_preflight_headers(const CorsConfig& cors, std::string_view origin,
                                  std::optional<std::string_view> request_headers) {
  HeaderList out;
  add_origin(cors, origin, "Access-Control-Request-Method, Access-Control-Request-Headers", out);
  out.emplace_back("Access-Control-Allow-Methods", cors.allow_methods);
  if (!cors.allow_headers.empty()) {
    out.emplace_back("Access-Control-Allow-Headers", cors.allow_headers);
  } else if (request_headers && is_name_list(ascii::trim(*request_headers))) {
    out.emplace_back("Access-Control-Allow-Headers", std::string(ascii::trim(*request_headers)));
  }
  if (cors.max_age) out.emplace_back("Access-Control-Max-Age", std::to_string(*cors.max_age));
  out.emplace_back("Cache-Control", "no-store");
  return out;
}

void append_cors_response_headers(const CorsConfig& cors, std::string_view origin,
                                  HeaderList& out) {
  add_origin(cors, origin, "", out);
  out.emplace_back("Access-Control-Expose-Headers", cors.expose_headers);
}

}  // namespace sluice
