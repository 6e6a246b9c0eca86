#include <catch2/catch.hpp>

#include "upstream/h2/h2_head.hpp"

using namespace sluice;

namespace {

std::string field(const H2Fields& fields, std::string_view name) {
  for (const auto& [n, v] : fields) {
    if (n == name) return v;
  }
  return "<absent>";
}

}  // namespace

TEST_CASE("A forwarded head becomes HTTP/2 fields, pseudo-headers first", "[h2]") {
  const auto fields = h2_request_fields(
      "POST /pkg.Svc/Get?x=1 HTTP/1.1\r\n"
      "Host: api.example\r\n"
      "Content-Type: application/json\r\n"
      "X-Forwarded-For: 10.0.0.1\r\n"
      "Content-Length: 5\r\n"
      "\r\n",
      "http");
  REQUIRE(fields);
  REQUIRE(fields->size() == 7);
  CHECK((*fields)[0] == std::pair<std::string, std::string>{":method", "POST"});
  CHECK((*fields)[1] == std::pair<std::string, std::string>{":scheme", "http"});
  CHECK((*fields)[2] == std::pair<std::string, std::string>{":authority", "api.example"});
  CHECK((*fields)[3] == std::pair<std::string, std::string>{":path", "/pkg.Svc/Get?x=1"});
  CHECK(field(*fields, "content-type") == "application/json");
  CHECK(field(*fields, "x-forwarded-for") == "10.0.0.1");
  CHECK(field(*fields, "content-length") == "5");
  CHECK(field(*fields, "host") == "<absent>");
}

TEST_CASE("Connection-specific fields are not sent over HTTP/2", "[h2]") {
  const auto fields = h2_request_fields(
      "GET / HTTP/1.1\r\n"
      "Host: a\r\n"
      "Connection: keep-alive, X-Hop\r\n"
      "X-Hop: 1\r\n"
      "Keep-Alive: timeout=5\r\n"
      "Proxy-Connection: keep-alive\r\n"
      "Transfer-Encoding: chunked\r\n"
      "Upgrade: websocket\r\n"
      "TE: gzip\r\n"
      "X-Kept: yes\r\n"
      "\r\n",
      "https");
  REQUIRE(fields);
  CHECK(fields->size() == 5);
  CHECK(field(*fields, ":scheme") == "https");
  CHECK(field(*fields, "x-kept") == "yes");
  CHECK(field(*fields, "te") == "<absent>");
  CHECK(field(*fields, "x-hop") == "<absent>");
}

TEST_CASE("A gRPC request carries te: trailers, once", "[h2]") {
  const auto without = h2_request_fields(
      "POST /a/B HTTP/1.1\r\nHost: h\r\nContent-Type: application/grpc+proto\r\n\r\n", "http");
  REQUIRE(without);
  CHECK(field(*without, "te") == "trailers");
  const auto with = h2_request_fields(
      "POST /a/B HTTP/1.1\r\nHost: h\r\nTE: trailers\r\nContent-Type: application/grpc\r\n\r\n",
      "http");
  REQUIRE(with);
  CHECK(std::count_if(with->begin(), with->end(), [](const auto& f) { return f.first == "te"; }) == 1);
  const auto plain = h2_request_fields("GET / HTTP/1.1\r\nHost: h\r\n\r\n", "http");
  REQUIRE(plain);
  CHECK(field(*plain, "te") == "<absent>");
}

TEST_CASE("What is not a request head is refused", "[h2]") {
  CHECK_FALSE(h2_request_fields("", "http"));
  CHECK_FALSE(h2_request_fields("GET\r\n\r\n", "http"));
  CHECK_FALSE(h2_request_fields("GET / HTTP/1.1\r\nHost: a\r\n", "http"));  // no blank line
  CHECK_FALSE(h2_request_fields("GET / HTTP/1.1\r\nno colon\r\n\r\n", "http"));
}

TEST_CASE("A :status value is a three-digit code", "[h2]") {
  CHECK(h2_status("200") == 200u);
  CHECK(h2_status("103") == 103u);
  CHECK_FALSE(h2_status("20"));
  CHECK_FALSE(h2_status("2000"));
  CHECK_FALSE(h2_status("abc"));
  CHECK_FALSE(h2_status("099"));
}

TEST_CASE("A content-length value is digits only", "[h2]") {
  CHECK(h2_content_length("0") == 0u);
  CHECK(h2_content_length("1048576") == 1048576u);
  CHECK(h2_content_length("18446744073709551615") == 18446744073709551615u);
  CHECK_FALSE(h2_content_length(""));
  CHECK_FALSE(h2_content_length("-1"));
  CHECK_FALSE(h2_content_length("+1"));
  CHECK_FALSE(h2_content_length(" 1"));
  CHECK_FALSE(h2_content_length("1,1"));
  CHECK_FALSE(h2_content_length("12abc"));
  CHECK_FALSE(h2_content_length("18446744073709551616"));  // past 2^64 - 1
}
