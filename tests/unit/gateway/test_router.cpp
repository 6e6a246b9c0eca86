// Route selection and upstream targets: pure functions of config and request line.
#include <re2/re2.h>
#include <catch2/catch.hpp>

#include <string>

#include "gateway/config/load.hpp"
#include "gateway/router.hpp"

namespace sluice {
namespace {

std::shared_ptr<const Config> make_config(const std::string& routes) {
  const auto result = parse_config(R"(
upstreams:
  app: { servers: ["127.0.0.1:9000"] }
  other: { servers: ["127.0.0.1:9001"] }
routes:
)" + routes,
                                   "router.yaml");
  INFO((result.errors.empty() ? std::string() : result.errors.front()));
  REQUIRE(result.config);
  return result.config;
}

// The name of the selected route, or "404" / "405 <Allow>".
std::string pick(const Config& config, std::string_view method, std::string_view target,
                 std::string_view host = "example.com") {
  const auto decision = select_route(config, method, target, host);
  switch (decision.kind) {
    case RouteDecision::Kind::kMatched:
      return decision.route->name;
    case RouteDecision::Kind::kNotFound:
      return "404";
    case RouteDecision::Kind::kMethodNotAllowed:
      return "405 " + decision.allow;
  }
  return "?";
}

}  // namespace

TEST_CASE("path_prefix is a plain string prefix", "[router]") {
  const auto c = make_config(R"(
  - { name: api, match: { path_prefix: "/api" }, upstream: app }
)");
  CHECK(pick(*c, "GET", "/api") == "api");
  CHECK(pick(*c, "GET", "/api/orders") == "api");
  CHECK(pick(*c, "GET", "/apiv2") == "api");  // as in nginx and Envoy
  CHECK(pick(*c, "GET", "/ap") == "404");
  CHECK(pick(*c, "GET", "/API") == "404");  // paths are case-sensitive
  CHECK(pick(*c, "GET", "/other/api") == "404");
}

TEST_CASE("path_exact and path_regex match the whole path, never the query", "[router]") {
  const auto c = make_config(R"(
  - { name: health, match: { path_exact: "/health" }, upstream: app }
  - { name: user, match: { path_regex: "/users/[0-9]+" }, upstream: app }
)");
  CHECK(pick(*c, "GET", "/health") == "health");
  CHECK(pick(*c, "GET", "/health?verbose=1") == "health");
  CHECK(pick(*c, "GET", "/health/") == "404");
  CHECK(pick(*c, "GET", "/healthz") == "404");
  CHECK(pick(*c, "GET", "/users/42") == "user");
  CHECK(pick(*c, "GET", "/users/42?x=/users/1") == "user");
  CHECK(pick(*c, "GET", "/users/42/orders") == "404");  // regex_match, not regex_search
  CHECK(pick(*c, "GET", "/v1/users/42") == "404");
  CHECK(pick(*c, "GET", "/users/") == "404");
}

TEST_CASE("a very long path against a regex route does not exhaust the stack", "[router]") {
  const auto c = make_config(R"(
  - { name: any, match: { path_regex: "/files/(a|b|/)*" }, upstream: app }
  - { name: star, match: { path_regex: "/x/.*" }, upstream: app }
)");
  std::string long_path = "/files/";
  for (int i = 0; i < 200000; ++i) long_path += "ab/"[i % 3];
  CHECK(pick(*c, "GET", long_path) == "any");
  CHECK(pick(*c, "GET", "/x/" + std::string(1000000, 'y')) == "star");
  CHECK(pick(*c, "GET", long_path + "c") == "404");
}

TEST_CASE("first match wins", "[router]") {
  const auto c = make_config(R"(
  - { name: orders, match: { path_prefix: "/api/orders" }, upstream: other }
  - { name: api, match: { path_prefix: "/api/" }, upstream: app }
  - { name: all, match: { path_prefix: "/" }, upstream: app }
)");
  CHECK(pick(*c, "GET", "/api/orders/7") == "orders");
  CHECK(pick(*c, "GET", "/api/users") == "api");
  CHECK(pick(*c, "GET", "/") == "all");
  const auto decision = select_route(*c, "GET", "/api/orders", "h");
  REQUIRE(decision.route);
  CHECK(decision.route->upstream_index == 1);
}

TEST_CASE("host is compared without port and case-insensitively", "[router]") {
  const auto c = make_config(R"(
  - { name: api, match: { path_prefix: "/", host: "api.example.com" }, upstream: app }
  - { name: v6, match: { path_prefix: "/", host: "[::1]" }, upstream: app }
  - { name: fallback, match: { path_prefix: "/public" }, upstream: app }
)");
  CHECK(pick(*c, "GET", "/x", "api.example.com") == "api");
  CHECK(pick(*c, "GET", "/x", "API.Example.COM:8080") == "api");
  CHECK(pick(*c, "GET", "/x", "api.example.com.") == "api");
  CHECK(pick(*c, "GET", "/x", "[::1]:8080") == "v6");
  CHECK(pick(*c, "GET", "/x", "www.example.com") == "404");
  CHECK(pick(*c, "GET", "/x", "") == "404");
  CHECK(pick(*c, "GET", "/public/a", "www.example.com") == "fallback");
}

TEST_CASE("a method no matching route allows gives 405 with the union of Allow", "[router]") {
  const auto c = make_config(R"(
  - { name: read, match: { path_prefix: "/api/", methods: [GET, HEAD] }, upstream: app }
  - { name: write, match: { path_prefix: "/api/", methods: [POST, GET, PUT] }, upstream: app }
  - { name: other_host, match: { path_prefix: "/api/", host: x.test, methods: [PATCH] }, upstream: app }
  - { name: docs, match: { path_exact: "/docs", methods: [GET] }, upstream: app }
)");
  CHECK(pick(*c, "GET", "/api/a") == "read");
  CHECK(pick(*c, "POST", "/api/a") == "write");
  // Routes for another host do not contribute to Allow.
  CHECK(pick(*c, "DELETE", "/api/a") == "405 GET, HEAD, POST, PUT");
  CHECK(pick(*c, "get", "/api/a") == "405 GET, HEAD, POST, PUT");  // methods are case-sensitive
  CHECK(pick(*c, "PATCH", "/api/a", "x.test") == "other_host");
  CHECK(pick(*c, "DELETE", "/api/a", "x.test") == "405 GET, HEAD, POST, PUT, PATCH");
  CHECK(pick(*c, "POST", "/docs") == "405 GET");
  CHECK(pick(*c, "POST", "/nothing") == "404");
}

TEST_CASE("a later route without a method list still matches after a 405 candidate", "[router]") {
  const auto c = make_config(R"(
  - { name: read, match: { path_prefix: "/", methods: [GET] }, upstream: app }
  - { name: any, match: { path_prefix: "/" }, upstream: app }
)");
  CHECK(pick(*c, "GET", "/a") == "read");
  CHECK(pick(*c, "DELETE", "/a") == "any");
}

TEST_CASE("no routes: everything is 404", "[router]") {
  const Config empty;
  CHECK(pick(empty, "GET", "/") == "404");
  CHECK(select_route(empty, "GET", "/", "h").allow.empty());
}

TEST_CASE("target_path", "[router]") {
  CHECK(target_path("/a/b?x=1&y=2") == "/a/b");
  CHECK(target_path("/a/b") == "/a/b");
  CHECK(target_path("/?") == "/");
  CHECK(target_path("?x") == "");
  CHECK(target_path("*") == "*");
  // absolute-form (RFC 9112 3.2.2)
  CHECK(target_path("http://example.com/a/b?q") == "/a/b");
  CHECK(target_path("http://example.com:8080") == "/");
  CHECK(target_path("http://example.com?q=1") == "/");
}

TEST_CASE("absolute-form targets are routed by their path", "[router]") {
  const auto c = make_config(R"(
  - { name: api, match: { path_prefix: "/api/" }, upstream: app }
)");
  CHECK(pick(*c, "GET", "http://example.com/api/x") == "api");
}

TEST_CASE("upstream_target strips the matched prefix only with strip_prefix", "[router]") {
  const auto c = make_config(R"(
  - { name: strip, match: { path_prefix: "/api/orders" }, upstream: app, strip_prefix: true }
  - { name: keep, match: { path_prefix: "/keep" }, upstream: app }
  - { name: exact, match: { path_exact: "/exact" }, upstream: app }
)");
  const RouteConfig& strip = c->routes[0];
  CHECK(upstream_target(strip, "/api/orders/42") == "/42");
  CHECK(upstream_target(strip, "/api/orders/42?expand=items&x=/api/orders") ==
        "/42?expand=items&x=/api/orders");
  CHECK(upstream_target(strip, "/api/orders") == "/");  // empty becomes "/"
  CHECK(upstream_target(strip, "/api/orders?page=2") == "/?page=2");
  CHECK(upstream_target(strip, "/api/orders/") == "/");
  CHECK(upstream_target(strip, "/api/ordersv2/x") == "/v2/x");  // stays a valid origin-form path
  CHECK(upstream_target(strip, "/unrelated?q") == "/unrelated?q");
  CHECK(upstream_target(strip, "http://h/api/orders/1?q") == "/1?q");
  CHECK(upstream_target(c->routes[1], "/keep/a?b") == "/keep/a?b");
  CHECK(upstream_target(c->routes[2], "/exact?x") == "/exact?x");
  // Unchanged targets are not copied: no rewrite is returned for them.
  CHECK(rewritten_target(strip, "/api/orders/42") == std::optional<std::string>("/42"));
  CHECK_FALSE(rewritten_target(strip, "/unrelated?q"));
  CHECK_FALSE(rewritten_target(c->routes[1], "/keep/a?b"));
  CHECK_FALSE(rewritten_target(c->routes[2], "/exact?x"));
}

TEST_CASE("upstream_target strips a prefix matched by the route path from the forwarded path",
          "[router]") {
  const auto c = make_config(R"(
  - { name: strip, match: { path_prefix: "/api/orders" }, upstream: app, strip_prefix: true }
)");
  const RouteConfig& strip = c->routes[0];
  // The route path of "/api;v=2/orders/42" is "/api/orders/42": the prefix matched.
  CHECK(upstream_target(strip, "/api;v=2/orders/42?q") == "/42?q");
  // The parameters of the segment where the prefix ends go with it; later ones stay.
  CHECK(upstream_target(strip, "/api/orders;v=1/42;x") == "/42;x");
  CHECK(upstream_target(strip, "/api/orders;v=1") == "/");
  CHECK(upstream_target(strip, "/api/ordersv2;p/x") == "/v2;p/x");
  CHECK(upstream_target(strip, "/api/;p/orders/1") == "/1");
  CHECK(upstream_target(strip, "/api/x;/orders") == "/api/x;/orders");  // no match: unchanged
}

TEST_CASE("routes built by hand", "[router]") {
  // A regex route without a compiled regex (a hand-built config) never matches.
  Config config;
  RouteConfig route;
  route.name = "broken";
  route.match.path_kind = RouteMatch::PathKind::kRegex;
  route.match.path = ".*";
  config.routes.push_back(route);
  CHECK(pick(config, "GET", "/") == "404");
  config.routes[0].match.regex = std::make_shared<const re2::RE2>(".*");
  CHECK(pick(config, "GET", "/") == "broken");
}

}  // namespace sluice
