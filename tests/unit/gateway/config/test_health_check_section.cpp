// upstreams.NAME.health_check: defaults and the values read. Its failures are
// bad fixtures (test_bad_fixtures.cpp).
#include <catch2/catch.hpp>

#include "support/config_text.hpp"

namespace sluice {

using testing::parse_ok;

TEST_CASE("an upstream without health_check has no active checks", "[config]") {
  const auto config = parse_ok(testing::kMinimalTail);
  CHECK_FALSE(config->upstreams.at(0).health_check);
}

TEST_CASE("health_check defaults", "[config]") {
  const auto config = parse_ok(R"(
upstreams:
  app:
    servers: ["127.0.0.1:9000"]
    health_check: { path: /healthz }
routes: []
)");
  const auto& check = config->upstreams.at(0).health_check;
  REQUIRE(check);
  CHECK(check->path == "/healthz");
  CHECK(check->interval == std::chrono::milliseconds(5000));
  CHECK(check->timeout == std::chrono::milliseconds(1000));
  CHECK(check->healthy_threshold == 2);
  CHECK(check->unhealthy_threshold == 3);
  CHECK(check->expected_status == std::vector<unsigned>{200});
}

TEST_CASE("health_check values", "[config]") {
  const auto config = parse_ok(R"(
upstreams:
  app:
    servers: ["127.0.0.1:9000"]
    health_check:
      path: "/status?probe=1"
      interval_ms: 300
      timeout_ms: 299
      healthy_threshold: 1
      unhealthy_threshold: 5
      expected_status: [200, 204]
  other:
    servers: ["127.0.0.1:9001"]
    health_check: { path: /, expected_status: 418 }
routes: []
)");
  const auto& check = *config->upstreams.at(0).health_check;
  CHECK(check.path == "/status?probe=1");
  CHECK(check.interval == std::chrono::milliseconds(300));
  CHECK(check.timeout == std::chrono::milliseconds(299));
  CHECK(check.healthy_threshold == 1);
  CHECK(check.unhealthy_threshold == 5);
  CHECK(check.expected_status == std::vector<unsigned>{200, 204});
  CHECK(config->upstreams.at(1).health_check->expected_status == std::vector<unsigned>{418});
}

}  // namespace sluice
