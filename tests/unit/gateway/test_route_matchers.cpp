// Route matchers on headers, query parameters and cookies, and weighted
// splits: pure functions of the config and the request.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/ascii.hpp"
#include "gateway/route_split.hpp"
#include "gateway/router.hpp"
#include "support/config_text.hpp"
#include "upstream/balance/stable_hash.hpp"

namespace sluice {
namespace {

std::shared_ptr<const Config> matcher_config(const std::string& routes) {
  return testing::parse_ok(R"(
upstreams:
  stable: { servers: ["127.0.0.1:9000"] }
  canary: { servers: ["127.0.0.1:9001"] }
  third: { servers: ["127.0.0.1:9002"] }
routes:
)" + routes);
}

// A request's headers (name, value lines in order) and query.
struct MatcherRequest final : MatchInput {
  std::vector<std::pair<std::string, std::string>> headers;
  std::string target_query;
  std::string_view query() const override { return target_query; }
  void each_header(std::string_view name,
                   const std::function<void(std::string_view)>& fn) const override {
    for (const auto& [n, v] : headers) {
      if (ascii::iequals(n, name)) fn(v);
    }
  }
};

std::string route_for(const Config& config, const MatcherRequest& req, std::string_view method = "GET") {
  const auto decision = select_route(config, method, "/api/x", "example.com", &req);
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

MatcherRequest with_fields(std::vector<std::pair<std::string, std::string>> headers,
                 std::string query = "") {
  MatcherRequest r;
  r.headers = std::move(headers);
  r.target_query = std::move(query);
  return r;
}

}  // namespace

TEST_CASE("header matchers: exact, prefix, regex, present, absent, inverted", "[router]") {
  const auto c = matcher_config(R"(
  - name: beta
    match: { path_prefix: /api, headers: [{ name: X-Beta, exact: "1" }] }
    upstream: canary
  - name: mobile
    match: { path_prefix: /api, headers: [{ name: User-Agent, regex: ".*Mobile.*" }] }
    upstream: canary
  - name: v2
    match: { path_prefix: /api, headers: [{ name: Accept, prefix: "application/vnd.v2" }] }
    upstream: canary
  - name: traced
    match: { path_prefix: /api, headers: [{ name: X-Trace, present: true }, { name: X-Internal, absent: true }] }
    upstream: canary
  - name: not-curl
    match: { path_prefix: /api, headers: [{ name: User-Agent, prefix: curl, invert: true }] }
    upstream: stable
  - { name: rest, match: { path_prefix: / }, upstream: stable }
)");
  CHECK(route_for(*c, with_fields({{"x-beta", "1"}})) == "beta");  // names in any case
  CHECK(route_for(*c, with_fields({{"X-Beta", "10"}, {"User-Agent", "curl/8"}})) == "rest");
  CHECK(route_for(*c, with_fields({{"User-Agent", "Foo Mobile Safari"}})) == "mobile");
  // A regex matches the whole value.
  CHECK(route_for(*c, with_fields({{"User-Agent", "curl Mobile"}})) == "mobile");
  CHECK(route_for(*c, with_fields({{"Accept", "application/vnd.v2+json"}, {"User-Agent", "curl"}})) == "v2");
  CHECK(route_for(*c, with_fields({{"X-Trace", ""}, {"User-Agent", "curl"}})) == "traced");
  CHECK(route_for(*c, with_fields({{"X-Trace", "1"}, {"X-Internal", "1"}, {"User-Agent", "curl"}})) ==
        "rest");
  // Inverted: a request without the header passes too (its test failed).
  CHECK(route_for(*c, with_fields({})) == "not-curl");
  CHECK(route_for(*c, with_fields({{"User-Agent", "wget"}})) == "not-curl");
  // No input at all: as a request without headers.
  CHECK(select_route(*c, "GET", "/api/x", "h").route->name == "not-curl");
}

TEST_CASE("header matchers: several lines are joined with commas", "[router]") {
  const auto c = matcher_config(R"(
  - name: both
    match: { path_prefix: /, headers: [{ name: X-Tag, exact: "a,b" }] }
    upstream: canary
  - { name: rest, match: { path_prefix: / }, upstream: stable }
)");
  CHECK(route_for(*c, with_fields({{"X-Tag", "a"}, {"X-Tag", "b"}})) == "both");
  CHECK(route_for(*c, with_fields({{"X-Tag", "a"}})) == "rest");
}

TEST_CASE("query and cookie matchers", "[router]") {
  const auto c = matcher_config(R"(
  - name: v2
    match: { path_prefix: /, query: [{ name: version, exact: "2 beta" }] }
    upstream: canary
  - name: debug
    match: { path_prefix: /, query: [{ name: debug, present: true }] }
    upstream: canary
  - name: canary-cookie
    match: { path_prefix: /, cookies: [{ name: canary, regex: "yes|always" }] }
    upstream: canary
  - { name: rest, match: { path_prefix: / }, upstream: stable }
)");
  CHECK(route_for(*c, with_fields({}, "version=2+beta")) == "v2");  // form-decoded
  CHECK(route_for(*c, with_fields({}, "a=1&version=2%20beta")) == "v2");
  CHECK(route_for(*c, with_fields({}, "version=2")) == "rest");
  CHECK(route_for(*c, with_fields({}, "debug")) == "debug");
  CHECK(route_for(*c, with_fields({{"Cookie", "theme=dark; canary=always"}})) == "canary-cookie");
  // HTTP/2 cookie crumbs: one line per cookie.
  CHECK(route_for(*c, with_fields({{"cookie", "theme=dark"}, {"cookie", "canary=yes"}})) == "canary-cookie");
  CHECK(route_for(*c, with_fields({{"Cookie", "canary=no"}})) == "rest");
}

TEST_CASE("a route whose matchers fail gives no 405 either", "[router]") {
  const auto c = matcher_config(R"(
  - name: admin
    match: { path_prefix: /, methods: [POST], headers: [{ name: X-Admin, exact: "1" }] }
    upstream: canary
  - { name: reads, match: { path_prefix: /, methods: [GET] }, upstream: stable }
)");
  CHECK(route_for(*c, with_fields({{"X-Admin", "1"}}), "POST") == "admin");
  CHECK(route_for(*c, with_fields({}), "POST") == "405 GET");
  CHECK(route_for(*c, with_fields({{"X-Admin", "1"}}), "DELETE") == "405 POST, GET");
}

TEST_CASE("split: each worker's round robin follows the weights exactly", "[router][split]") {
  const auto c = matcher_config(R"(
  - name: shop
    match: { path_prefix: / }
    upstreams: [{ name: stable, weight: 90 }, { name: canary, weight: 10 }, { name: third, weight: 0 }]
)");
  const RouteConfig& route = c->routes[0];
  CHECK(route.upstream == "stable");  // the first that takes traffic
  RouteSplits splits;
  std::map<std::string, int> count;
  for (int i = 0; i < 10000; ++i) ++count[splits.upstream_for(c, route, std::nullopt).name];
  CHECK(count["stable"] == 9000);
  CHECK(count["canary"] == 1000);
  CHECK(count["third"] == 0);
}

TEST_CASE("split: an old and a new configuration each keep their own count", "[router][split]") {
  const std::string routes = R"(
  - name: shop
    match: { path_prefix: / }
    upstreams: [{ name: stable, weight: 9 }, { name: canary, weight: 1 }]
)";
  const auto old_config = matcher_config(routes);
  const auto new_config = matcher_config(routes);
  RouteSplits splits;
  std::map<std::string, int> old_count;
  std::map<std::string, int> new_count;
  // Requests of both alternate while the old one finishes (a reload).
  for (int i = 0; i < 1000; ++i) {
    ++old_count[splits.upstream_for(old_config, old_config->routes[0], std::nullopt).name];
    ++new_count[splits.upstream_for(new_config, new_config->routes[0], std::nullopt).name];
  }
  CHECK(old_count["canary"] == 100);
  CHECK(new_count["canary"] == 100);
}

TEST_CASE("split: sticky on a key, spread by the weights", "[router][split]") {
  const auto c = matcher_config(R"(
  - name: shop
    match: { path_prefix: / }
    upstreams: [{ name: stable, weight: 80 }, { name: canary, weight: 20 }]
    split_on: cookie:session
)");
  const RouteConfig& route = c->routes[0];
  RouteSplits a;
  RouteSplits b;
  std::map<std::string, int> count;
  for (int i = 0; i < 20000; ++i) {
    const auto key = stable_hash("session-" + std::to_string(i));
    const auto& side = a.upstream_for(c, route, key);
    CHECK(&b.upstream_for(c, route, key) == &side);  // every worker agrees
    CHECK(&a.upstream_for(c, route, key) == &side);  // and keeps it
    ++count[side.name];
  }
  CHECK(count["canary"] == Approx(4000).epsilon(0.05));
  // More weight to the canary moves only stable keys to it, never back.
  TrafficSplit wider = route.split;
  wider.upstreams[0].weight = 70;
  wider.upstreams[1].weight = 30;
  wider.total_weight = 100;
  for (int i = 0; i < 5000; ++i) {
    const auto key = stable_hash("session-" + std::to_string(i));
    if (split_side_for_key(route.split, key) == 1) CHECK(split_side_for_key(wider, key) == 1);
  }
}

}  // namespace sluice
