// The second pass: names resolved to indexes, checks across sections, and
// their errors in reading order even when many share a line.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gateway/config/load.hpp"
#include "gateway/config/resolve.hpp"
#include "support/config_text.hpp"

namespace sluice {
namespace {


TEST_CASE("resolve: listeners overlap on one port with a shared or wildcard address", "[config]") {
  using config::listeners_overlap;
  CHECK(listeners_overlap({"127.0.0.1", 80}, {"127.0.0.1", 80}));
  CHECK(listeners_overlap({"0.0.0.0", 80}, {"127.0.0.1", 80}));
  CHECK(listeners_overlap({"127.0.0.1", 80}, {"::", 80}));
  CHECK_FALSE(listeners_overlap({"127.0.0.1", 80}, {"127.0.0.2", 80}));
  CHECK_FALSE(listeners_overlap({"0.0.0.0", 80}, {"0.0.0.0", 81}));
  CHECK_FALSE(listeners_overlap({"0.0.0.0", 0}, {"0.0.0.0", 0}));  // any free port
}

TEST_CASE("resolve: names become indexes, in the order listed", "[config]") {
  const auto result = testing::parse_no_env(R"(
upstreams:
  a: { servers: ["127.0.0.1:9000"] }
  b: { servers: ["127.0.0.1:9001"] }
limits:
  x: { key: ip, capacity: 5, refill_per_second: 1 }
  y: { key: global, capacity: 5, refill_per_second: 1 }
routes:
  - { name: r, match: { path_prefix: / }, upstream: b, limits: [y, x] }
)");
  REQUIRE(result.config);
  const auto& route = result.config->routes[0];
  CHECK(route.upstream_index == 1);
  CHECK(route.limits == std::vector<std::string>{"y", "x"});
  CHECK(route.limit_indexes == std::vector<std::size_t>{1, 0});
}

TEST_CASE("resolve: cross-section errors keep the reading order on one line", "[config]") {
  // One flow line: errors of the first pass and of the second interleave as read.
  const auto result = testing::parse_no_env(
      "{upstreams: {a: {servers: [\"127.0.0.1:9000\"]}}, limits: {x: {key: ip, capacity: 1, "
      "refill_per_second: 1}}, routes: [{name: r, match: {path_prefix: /}, upstream: nope, "
      "strip_prefix: 3, limits: [x, x, y], on_redis_failure: maybe, cost: 2}]}\n");
  CHECK(result.errors ==
        std::vector<std::string>{
            "test.yaml:1: routes[0].upstream: unknown upstream \"nope\"",
            "test.yaml:1: routes[0].strip_prefix: expected true or false, got "
            "\"3\"",
            "test.yaml:1: routes[0].limits[1]: limit \"x\" is listed twice",
            "test.yaml:1: routes[0].limits[2]: unknown limit \"y\"",
            "test.yaml:1: routes[0].on_redis_failure: expected open, closed or local, "
            "got \"maybe\"",
            "test.yaml:1: routes[0].cost: cost 2 is more than the capacity 1 "
            "of limit \"x\"",
        });
}

TEST_CASE("resolve: limits listed twice, unknown limits and plans", "[config]") {
  const auto result = testing::parse_no_env(R"(
upstreams:
  a: { servers: ["127.0.0.1:9000"] }
limits:
  x:
    key: ip
    capacity: 4
    refill_per_second: 1
    plans: { gold: { capacity: 1 } }
routes:
  - name: r
    match: { path_prefix: / }
    upstream: a
    limits: [x, x, y, y]
    cost: 2
)");
  CHECK(result.errors ==
        std::vector<std::string>{
            "test.yaml:9: limits.x.plans.gold: unknown plan \"gold\": not "
            "api_keys.default_plan nor the plan of a consumer (known: free)",
            "test.yaml:14: routes[0].limits[1]: limit \"x\" is listed twice",
            "test.yaml:14: routes[0].limits[2]: unknown limit \"y\"",
            "test.yaml:14: routes[0].limits[3]: unknown limit \"y\"",
            "test.yaml:15: routes[0].cost: cost 2 is more than the capacity 1 of limit \"x\" "
            "plan \"gold\"",
        });
}

TEST_CASE("resolve: warnings only for a valid configuration", "[config]") {
  const std::string yaml = R"(
upstreams:
  a: { servers: ["127.0.0.1:9000"] }
limits:
  k: { key: api_key, capacity: 4, refill_per_second: 1 }
routes:
  - { name: r, match: { path_prefix: / }, upstream: a, limits: [k] }
)";
  const auto valid = testing::parse_no_env(yaml);
  REQUIRE(valid.config);
  REQUIRE(valid.warnings.size() == 1);
  CHECK(
      valid.warnings[0].starts_with("test.yaml:7: routes[0].limits: every limit is keyed by "
                                    "api_key"));
  const auto invalid = testing::parse_no_env(yaml + "log: { level: loud }\n");
  CHECK(invalid.warnings.empty());
}

}  // namespace
}  // namespace sluice
