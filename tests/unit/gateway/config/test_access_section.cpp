// ip_access (top level and per route), routes[].cors and client_headers as
// read from YAML: what each key becomes, and each mistake's message.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gateway/config/load.hpp"
#include "support/config_text.hpp"

namespace sluice {
namespace {

const char* const kAccessTail = R"(
upstreams: { app: { servers: ["127.0.0.1:9000"] } }
)";

IpAddress access_ip(std::string_view text) { return *parse_ip(text); }

std::vector<std::string> access_errors(const std::string& yaml) {
  const auto result = testing::parse_no_env(yaml);
  CHECK_FALSE(result.config);
  return result.errors;
}

}  // namespace

TEST_CASE("ip_access: lists, files, and the global and route lists", "[config][ip_access]") {
  const auto dir = std::filesystem::temp_directory_path() / "sluice-ip-access-test";
  std::filesystem::create_directories(dir);
  const auto deny_file = (dir / "deny.txt").string();
  {
    std::ofstream out(deny_file);
    out << "# abusers\n\n192.0.2.0/24   # a whole network\n2001:db8:bad::/48\n";
  }
  const auto c = testing::parse_ok_no_env(
      std::string("ip_access: { deny_file: \"") + deny_file + R"(" }
routes:
  - name: a
    match: { path_prefix: /a }
    upstream: app
    ip_access: { allow: ["10.0.0.0/8", "::1"], deny: ["10.1.0.0/16"] }
  - name: b
    match: { path_prefix: /b }
    upstream: app
)" + kAccessTail);
  using R = IpAccessConfig::Result;
  CHECK(c->ip_access.check(access_ip("192.0.2.9")) == R::kDenied);
  CHECK(c->ip_access.check(access_ip("2001:db8:bad:1::1")) == R::kDenied);
  CHECK(c->ip_access.check(access_ip("198.51.100.1")) == R::kAllowed);  // only a deny list
  CHECK(c->ip_access.has_deny);
  CHECK_FALSE(c->ip_access.has_allow);
  const auto& a = c->routes[0].ip_access;
  CHECK(a.check(access_ip("10.2.3.4")) == R::kAllowed);
  CHECK(a.check(access_ip("10.1.3.4")) == R::kDenied);
  CHECK(a.check(access_ip("::1")) == R::kAllowed);
  CHECK(a.check(access_ip("11.0.0.1")) == R::kNotAllowed);  // an allow list lets in only its own
  CHECK(c->routes[1].ip_access.empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("ip_access: mistakes are named with the entry", "[config][ip_access]") {
  const auto dir = std::filesystem::temp_directory_path() / "sluice-ip-access-bad";
  std::filesystem::create_directories(dir);
  const auto bad_file = (dir / "allow.txt").string();
  {
    std::ofstream out(bad_file);
    out << "10.0.0.0/8\n10.0.0.300\n\n2001:db8::/129\n10.0.0.0/8 # again: fine\n";
  }
  const auto errors = access_errors(
      R"(ip_access:
  allow: ["10.0.0.0/8", "not-an-address", "192.0.2.0/24"]
  deny: ["192.0.2.7/24"]
  allow_file: ")" + bad_file + R"("
  deny_file: /nonexistent/sluice/deny.txt
routes: [{ name: a, match: { path_prefix: / }, upstream: app }]
)" + kAccessTail);
  REQUIRE(errors.size() == 5);
  CHECK(errors[0] == "test.yaml:2: ip_access.allow[1]: invalid CIDR \"not-an-address\"");
  CHECK(errors[1] == "test.yaml:3: ip_access.deny[0]: 192.0.2.0/24 is both allowed and denied");
  CHECK(errors[2] == "test.yaml:4: ip_access.allow_file: " + bad_file +
                         ":2: invalid CIDR \"10.0.0.300\"");
  CHECK(errors[3] == "test.yaml:4: ip_access.allow_file: " + bad_file +
                         ":4: invalid CIDR \"2001:db8::/129\"");
  CHECK(errors[4] == "test.yaml:5: ip_access.deny_file: cannot read "
                     "\"/nonexistent/sluice/deny.txt\": No such file or directory");
  std::filesystem::remove_all(dir);
}

TEST_CASE("cors: origins, methods, headers and their defaults", "[config][cors]") {
  const auto c = testing::parse_ok_no_env(std::string(R"(
routes:
  - name: a
    match: { path_prefix: /a, methods: [GET, post] }
    upstream: app
    cors:
      allow_origins: ["https://App.Example.com", "https://*.example.org", "http://localhost:3000"]
      allow_credentials: true
      expose_headers: [X-Trace]
      max_age: 600
  - name: b
    match: { path_prefix: /b }
    upstream: app
    cors: { allow_origins: ["*"], allow_headers: [Content-Type, X-Api-Key], allow_methods: [get] }
)") + kAccessTail);
  const CorsConfig& a = c->routes[0].cors;
  CHECK(a.enabled);
  CHECK(a.allow_methods == "GET, POST");  // the route's methods
  CHECK(a.allow_headers.empty());         // echo what the preflight asks
  CHECK(a.expose_headers ==
        "RateLimit, RateLimit-Policy, Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, "
        "X-RateLimit-Reset, X-Request-Id, X-Trace");
  CHECK(a.max_age == 600);
  CHECK(a.allow_credentials);
  CHECK(a.allows("https://app.example.com"));
  CHECK(a.allows("https://a.example.org"));
  CHECK(a.allows("https://a.b.example.org"));
  CHECK(a.allows("http://localhost:3000"));
  CHECK_FALSE(a.allows("https://example.org"));      // the wildcard needs a label
  CHECK_FALSE(a.allows("http://a.example.org"));     // another scheme
  CHECK_FALSE(a.allows("https://evil.com/.example.org"));
  CHECK_FALSE(a.allows("https://a.example.org.evil.com"));
  CHECK_FALSE(a.allows("http://localhost:3001"));
  CHECK_FALSE(a.allows("null"));
  CHECK_FALSE(a.allows(""));
  // The upstream's own CORS headers are dropped on a cors route.
  CHECK(c->routes[0].response_headers.drops("access-control-allow-origin"));
  const CorsConfig& b = c->routes[1].cors;
  CHECK(b.any_origin);
  CHECK(b.allows("https://anything.test"));
  CHECK_FALSE(b.allows("null"));
  CHECK(b.allow_methods == "GET");
  CHECK(b.allow_headers == "Content-Type, X-Api-Key");
  CHECK_FALSE(b.max_age);
  CHECK_FALSE(c->routes[0].client_headers);
}

TEST_CASE("cors: mistakes", "[config][cors]") {
  const auto errors = access_errors(std::string(R"(routes:
  - name: a
    match: { path_prefix: /a }
    upstream: app
    cors:
      allow_origins: ["*", "null", "https://*evil.com", "example.com", "https://a.com/path"]
      allow_credentials: true
      max_age: 100000
  - name: b
    match: { path_prefix: /b }
    upstream: app
    cors: { allow_methods: [GET] }
)") + kAccessTail);
  REQUIRE(errors.size() == 7);
  CHECK(errors[0] ==
        "test.yaml:6: routes[0].cors.allow_origins[1]: the origin \"null\" is what sandboxed pages, "
        "files and redirects send; any page can make it, so it cannot be allowed");
  CHECK(errors[1] == "test.yaml:6: routes[0].cors.allow_origins[2]: a wildcard origin is "
                     "\"scheme://*.domain\" (one \"*\", first), got \"https://*evil.com\"");
  CHECK(errors[2] == "test.yaml:6: routes[0].cors.allow_origins[3]: expected an origin such as "
                     "\"https://app.example.com\" or \"https://*.example.com\", got \"example.com\"");
  CHECK(errors[3] == "test.yaml:6: routes[0].cors.allow_origins[4]: expected an origin such as "
                     "\"https://app.example.com\" or \"https://*.example.com\", got "
                     "\"https://a.com/path\"");
  CHECK(errors[4] == "test.yaml:7: routes[0].cors.allow_credentials: allow_credentials with the "
                     "origin \"*\" would let every site read a signed-in user's responses: list "
                     "the origins");
  CHECK(errors[5].starts_with("test.yaml:8: routes[0].cors.max_age: "));
  CHECK(errors[6] == "test.yaml:12: routes[1].cors: missing required key \"allow_origins\"");
}

TEST_CASE("client_headers on limits and routes", "[config][client_headers]") {
  const auto c = testing::parse_ok_no_env(std::string(R"(
limits:
  abuse: { key: ip, capacity: 100, refill_per_second: 10, client_headers: none }
  plan: { key: ip, capacity: 10, refill_per_second: 1, client_headers: ietf }
routes:
  - { name: a, match: { path_prefix: /a }, upstream: app, limits: [abuse, plan] }
  - { name: b, match: { path_prefix: /b }, upstream: app, limits: [plan], client_headers: legacy }
)") + kAccessTail);
  CHECK(c->limits[0].client_headers == ClientHeaders::kNone);
  CHECK(c->limits[1].client_headers == ClientHeaders::kIetf);
  CHECK_FALSE(c->routes[0].client_headers);
  CHECK(c->routes[1].client_headers == ClientHeaders::kLegacy);
  const auto errors = access_errors(std::string(R"(
limits:
  abuse: { key: ip, capacity: 100, refill_per_second: 10, client_headers: hidden }
routes: [{ name: a, match: { path_prefix: /a }, upstream: app, limits: [abuse], client_headers: [] }]
)") + kAccessTail);
  REQUIRE(errors.size() == 2);
  CHECK(errors[0] == "test.yaml:3: limits.abuse.client_headers: expected all, none, ietf or "
                     "legacy, got \"hidden\"");
  CHECK(errors[1].starts_with("test.yaml:4: routes[0].client_headers: "));
}

}  // namespace sluice
