// Request-target normalization and Host validation: pure functions.
#include <catch2/catch.hpp>

#include <string>

#include "gateway/request_target.hpp"

namespace sluice {
namespace {

// "target | route_path" when accepted, "400: <reason>" otherwise.
std::string normalized(std::string_view target) {
  NormalizedTarget out;
  const auto error = normalize_target(target, out);
  if (!error.empty()) return "400: " + std::string(error);
  return out.target + " | " + out.route_path;
}

bool refused(std::string_view target) {
  NormalizedTarget out;
  return !normalize_target(target, out).empty();
}

std::string absolute(std::string_view target) {
  const auto result = split_absolute_form(target);
  if (!result.error.empty()) return "400: " + std::string(result.error);
  return result.authority + " " + result.target;
}

bool host_ok(std::string_view host) {
  return check_host(host).empty();
}

}  // namespace

TEST_CASE("ordinary targets are kept as they are", "[request_target]") {
  CHECK(normalized("/") == "/ | /");
  CHECK(normalized("/api/orders/42") == "/api/orders/42 | /api/orders/42");
  CHECK(normalized("/api/a%20b/d.json?x=1&y=%2F") ==
        "/api/a%20b/d.json?x=1&y=%2F | /api/a%20b/d.json");
  CHECK(normalized("/a:b@c!$&'()*+,=/") == "/a:b@c!$&'()*+,=/ | /a:b@c!$&'()*+,=/");
  CHECK(normalized("*") == "* | *");
}

TEST_CASE("escapes of unreserved characters are decoded, others get upper-case hex",
          "[request_target]") {
  CHECK(normalized("/%61pi/x") == "/api/x | /api/x");
  CHECK(normalized("/%41%5a%30%39%2D%2e%5F%7e") == "/AZ09-._~ | /AZ09-._~");
  CHECK(normalized("/a%3ab%2a%c3%a9") == "/a%3Ab%2A%C3%A9 | /a%3Ab%2A%C3%A9");
  CHECK(normalized("/a%20b") == "/a%20b | /a%20b");
  // An escaped '%' stays escaped: nothing is decoded twice.
  CHECK(normalized("/%2561") == "/%2561 | /%2561");
  // An escaped ';' or '?' is data, not a delimiter.
  CHECK(normalized("/a%3bx/b%3f") == "/a%3Bx/b%3F | /a%3Bx/b%3F");
}

TEST_CASE("bytes a path may not hold raw are escaped", "[request_target]") {
  CHECK(normalized("/caf\xc3\xa9") == "/caf%C3%A9 | /caf%C3%A9");
  CHECK(normalized("/a\"<>[]^`{|}") ==
        "/a%22%3C%3E%5B%5D%5E%60%7B%7C%7D | "
        "/a%22%3C%3E%5B%5D%5E%60%7B%7C%7D");
  // Raw and escaped spellings meet.
  CHECK(normalized("/caf%c3%a9") == normalized("/caf\xc3\xa9"));
}

TEST_CASE("the query string is forwarded as received", "[request_target]") {
  CHECK(normalized("/%61?q=%61%2f&r=//&s=;x&t=..") == "/a?q=%61%2f&r=//&s=;x&t=.. | /a");
  CHECK(normalized("/a?") == "/a? | /a");
  CHECK(normalized("/a?%zz") == "/a?%zz | /a");  // not the gateway's to decode
}

TEST_CASE("runs of slashes are merged", "[request_target]") {
  CHECK(normalized("//api/x") == "/api/x | /api/x");
  CHECK(normalized("/api//a///b/") == "/api/a/b/ | /api/a/b/");
  CHECK(normalized("//") == "/ | /");
  CHECK(normalized("//?a//b") == "/?a//b | /");
}

TEST_CASE("path parameters are forwarded but not routed", "[request_target]") {
  CHECK(normalized("/api;x/") == "/api;x/ | /api/");
  CHECK(normalized("/exact;jsessionid=1") == "/exact;jsessionid=1 | /exact");
  CHECK(normalized("/a;b=1;c/d;e?q=;z") == "/a;b=1;c/d;e?q=;z | /a/d");
  // A segment made only of parameters leaves an empty segment: merged away.
  CHECK(normalized("/a/;p/b") == "/a/;p/b | /a/b");
  CHECK(normalized("/;p/a") == "/;p/a | /a");
  CHECK(normalized("/;jsessionid=1") == "/;jsessionid=1 | /");
  CHECK(normalized("/a;") == "/a; | /a");
  CHECK(route_path_of("/v1;x/items;y/3") == "/v1/items/3");
}

TEST_CASE("routes stay case-sensitive", "[request_target]") {
  CHECK(normalized("/API/x") == "/API/x | /API/x");
  CHECK(normalized("/%41PI") == "/API | /API");
}

TEST_CASE("fragments, control characters and malformed escapes are refused", "[request_target]") {
  CHECK(normalized("/exact#") == "400: fragment in request target");
  CHECK(refused("/a#b"));
  CHECK(refused("/a?q#f"));
  CHECK(refused("/a?q=\x01"));
  CHECK(refused(std::string_view("/a\0b", 4)));
  CHECK(refused("/a\x7f"));
  CHECK(normalized("/api/%") == "400: malformed percent-escape in path");
  CHECK(refused("/api/%2"));
  CHECK(refused("/api/%zz"));
  CHECK(refused("/api/%g0"));
  CHECK(refused("/api/%0g/x"));
  CHECK(refused("api/x"));
  CHECK(refused(""));
}

TEST_CASE("encoded '/', '\\' and NUL, and a raw '\\', are refused", "[request_target]") {
  CHECK(normalized("/a%2Fb") == "400: encoded '/', '\\' or NUL in path");
  CHECK(refused("/a%2fb"));
  CHECK(refused("/a%5Cb"));
  CHECK(refused("/a%5cb"));
  CHECK(refused("/a%00b"));
  CHECK(normalized("/a\\b") == "400: backslash in path");
  CHECK_FALSE(refused("/a?x=%2F&y=\\"));  // the query is not checked for them
}

TEST_CASE("dot segments are refused after decoding and without parameters", "[request_target]") {
  for (const char* target :
       {"/api/../admin", "/api/./x", "/api/%2e%2E/admin", "/api/..", "/api/.", "/%2e",
        "/api/..;/admin", "/api/.;x/a", "/api/%2e%2e;x/a", "/api/.%2E/a", "/a//..//b", "/..?q"}) {
    INFO(target);
    CHECK(normalized(target) == "400: dot segments in path");
  }
  CHECK(normalized("/api/..x/.hidden/a.b/...") ==
        "/api/..x/.hidden/a.b/... | /api/..x/.hidden/a.b/...");
  CHECK(normalized("/api/%2e%2e%2e") == "/api/... | /api/...");
  CHECK(normalized("/a?x=/../") == "/a?x=/../ | /a");
}

TEST_CASE("Host is an authority without userinfo", "[request_target]") {
  for (const char* host :
       {"example.com", "Example.COM.", "example.com:8080", "127.0.0.1", "127.0.0.1:65535", "h:0",
        "h:00080", "[::1]", "[::1]:80", "[2001:db8::1]", "[::ffff:1.2.3.4]", "[v1.x:y]", "a-b_c~d",
        "!$&'()*+,;=", "h%41", "999.1.1.1"}) {
    INFO(host);
    CHECK(host_ok(host));
  }
  for (const char* host : {"",
                           "a b",
                           "a/b",
                           "user@h",
                           "u:p@h",
                           "h:",
                           ":80",
                           "h:65536",
                           "h:123456",
                           "h:8o",
                           "h:-1",
                           "h: 80",
                           "h:80:80",
                           "[::1",
                           "[::1]x",
                           "[::1]:",
                           "[zz::1]",
                           "[1.2.3.4]",
                           "[fe80::1%25eth0]",
                           "[v.x]",
                           "[v1.]",
                           "[]",
                           "::1",
                           "h%zz",
                           "h%4",
                           "h?x",
                           "h#x",
                           "h\\x",
                           "a\tb",
                           "h[1]",
                           "caf\xc3\xa9",
                           "a,b c"}) {
    INFO(host);
    CHECK_FALSE(host_ok(host));
  }
}

TEST_CASE("absolute-form: http or https, a valid authority, an origin-form rest",
          "[request_target]") {
  CHECK(absolute("http://example.com/a/b?q=1") == "example.com /a/b?q=1");
  CHECK(absolute("HTTPS://Example.com:8443") == "Example.com:8443 /");
  CHECK(absolute("Http://h?q") == "h /?q");
  CHECK(absolute("http://[::1]:81//x") == "[::1]:81 //x");  // normalized afterwards
  CHECK(absolute("http://h#f") == "h /#f");                 // refused when normalized
  CHECK(absolute("gopher://x/") == "400: request target scheme is not http or https");
  CHECK(absolute("ftp://h/") == "400: request target scheme is not http or https");
  CHECK(absolute("httpx://h/") == "400: request target scheme is not http or https");
  CHECK(absolute("http:///") == "400: request target has an empty authority");
  CHECK(absolute("http://?q") == "400: request target has an empty authority");
  CHECK(absolute("http:/a") == "400: request target has no authority");
  CHECK(absolute("http:") == "400: request target has no authority");
  CHECK(absolute("example.com:443") == "400: request target scheme is not http or https");
  CHECK(absolute("nonsense") == "400: bad request target");
  CHECK(absolute("http://user@h/") == "400: request target has an invalid authority");
  CHECK(absolute("http://h:99999/") == "400: request target has an invalid authority");
  CHECK(absolute("http://h:/") == "400: request target has an invalid authority");
}

TEST_CASE("forwarded_prefix_length maps a route-path prefix onto the forwarded path",
          "[request_target]") {
  CHECK(forwarded_prefix_length("/api/orders/42", "/api/orders") == 11u);
  CHECK(forwarded_prefix_length("/api/orders", "/api/orders") == 11u);
  CHECK(forwarded_prefix_length("/api/ordersv2/x", "/api/orders") == 11u);
  CHECK(forwarded_prefix_length("/api/x", "/api/orders") == std::nullopt);
  CHECK(forwarded_prefix_length("/api", "/api/orders") == std::nullopt);
  // Parameters inside the prefix are skipped; those of its last segment go with it.
  CHECK(forwarded_prefix_length("/api;a/orders/42", "/api/orders") == 13u);
  CHECK(forwarded_prefix_length("/api/orders;v=1/42", "/api/orders") == 15u);
  CHECK(forwarded_prefix_length("/api/orders;v=1", "/api/orders") == 15u);
  CHECK(forwarded_prefix_length("/api/orders/;p/42", "/api/orders/") == 14u);
  CHECK(forwarded_prefix_length("/api/;p/orders/1", "/api/orders") == 14u);
  // A ';' in the prefix never matches: route paths have none.
  CHECK(forwarded_prefix_length("/a;b/c", "/a;b") == std::nullopt);
  CHECK(forwarded_prefix_length("/x", "") == 0u);
}

}  // namespace sluice
