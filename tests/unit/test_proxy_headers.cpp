#include <catch2/catch.hpp>

#include <boost/beast/http/fields.hpp>

#include "gateway/local_reply.hpp"
#include "upstream/proxy_headers.hpp"

namespace http = boost::beast::http;
using namespace sluice;

namespace {

std::vector<std::string> values(const http::fields& f, std::string_view name) {
  std::vector<std::string> out;
  for (auto [it, end] = f.equal_range(name); it != end; ++it) out.emplace_back(it->value());
  return out;
}

}  // namespace

TEST_CASE("hop-by-hop headers and the names Connection lists are removed", "[proxy_headers]") {
  http::fields f;
  f.set("Connection", "keep-alive, X-Secret");
  f.insert("Connection", "Upgrade,  X-Other ");
  f.set("X-Secret", "1");
  f.set("X-Other", "2");
  f.set("Keep-Alive", "timeout=5");
  f.set("Proxy-Connection", "keep-alive");
  f.set("TE", "trailers");
  f.set("Trailer", "X-T");
  f.set("Transfer-Encoding", "chunked");
  f.set("Upgrade", "websocket");
  f.set("Proxy-Authorization", "Basic abc");
  f.set("Proxy-Authenticate", "Basic");
  f.set("X-Kept", "yes");
  f.set("Content-Length", "10");
  strip_hop_by_hop(f);
  for (auto name : {"Connection", "X-Secret", "X-Other", "Keep-Alive", "Proxy-Connection", "TE",
                    "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Authorization",
                    "Proxy-Authenticate"}) {
    INFO(name);
    CHECK(f.count(name) == 0);
  }
  CHECK(f["X-Kept"] == "yes");
  CHECK(f["Content-Length"] == "10");
}

TEST_CASE("a client cannot strip forwarded headers through Connection", "[proxy_headers]") {
  http::fields f;
  f.set("Connection", "X-Forwarded-For, X-Request-Id, Via");
  f.set("X-Forwarded-For", "10.0.0.1");
  strip_hop_by_hop(f);  // removes the client's own X-Forwarded-For
  add_forwarded_headers(f, ForwardedInfo{"127.0.0.1", "http", "example.com", "abc"});
  CHECK(f["X-Forwarded-For"] == "127.0.0.1");
  CHECK(f["X-Request-Id"] == "abc");
  CHECK(f["Via"] == "1.1 sluice");
}

TEST_CASE("forwarded headers are appended and set", "[proxy_headers]") {
  http::fields f;
  f.insert("X-Forwarded-For", "203.0.113.7");
  f.insert("X-Forwarded-For", "10.0.0.2, 10.0.0.3");
  f.set("Via", "1.0 edge");
  f.set("X-Forwarded-Proto", "https");
  add_forwarded_headers(f, ForwardedInfo{"127.0.0.1", "http", "api.example.com:8080", "id-1"});
  CHECK(values(f, "X-Forwarded-For") ==
        std::vector<std::string>{"203.0.113.7, 10.0.0.2, 10.0.0.3, 127.0.0.1"});
  CHECK(f["X-Forwarded-Proto"] == "http");
  CHECK(f["X-Forwarded-Host"] == "api.example.com:8080");
  CHECK(values(f, "Via") == std::vector<std::string>{"1.0 edge, 1.1 sluice"});
  CHECK(f["X-Request-Id"] == "id-1");
}

TEST_CASE("X-Forwarded-Host is dropped when the request has no Host", "[proxy_headers]") {
  http::fields f;
  f.set("X-Forwarded-Host", "spoofed");
  add_forwarded_headers(f, ForwardedInfo{"::1", "http", "", "id"});
  CHECK(f.count("X-Forwarded-Host") == 0);
  CHECK(f["X-Forwarded-For"] == "::1");
}

TEST_CASE("request ids: kept when sane, generated otherwise", "[proxy_headers]") {
  CHECK(is_acceptable_request_id("abc-123"));
  CHECK_FALSE(is_acceptable_request_id(""));
  CHECK_FALSE(is_acceptable_request_id("has space"));
  CHECK_FALSE(is_acceptable_request_id(std::string(129, 'a')));
  CHECK_FALSE(is_acceptable_request_id("bad\x7f"));
  auto a = generate_request_id();
  auto b = generate_request_id();
  CHECK(a.size() == 32);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
}

TEST_CASE("local replies carry a status and a small JSON body", "[local_reply]") {
  auto r = make_local_reply(404, "no route matches", "rid-1");
  CHECK(r.status == 404);
  CHECK(r.content_type == "application/json");
  CHECK(r.body ==
        "{\"error\":\"Not Found\",\"message\":\"no route matches\",\"request_id\":\"rid-1\","
        "\"status\":404}\n");
  CHECK(reason_for(431) == "Request Header Fields Too Large");
  CHECK(reason_for(413) == "Content Too Large");
  auto escaped = make_local_reply(400, "bad \"quote\"", "x");
  CHECK(escaped.body.find("bad \\\"quote\\\"") != std::string::npos);
}
