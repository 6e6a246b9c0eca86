// routes[].on_limit and max_delay_ms: the defaults, delay with its bound, and
// max_delay_ms on a rejecting route (accepted, unused).
#include <catch2/catch.hpp>

#include <string>

#include "gateway/config/load.hpp"
#include "support/config_text.hpp"

namespace sluice {
namespace {

using testing::parse_ok;

const std::string kOnLimitHead = R"(
upstreams:
  app: { servers: ["127.0.0.1:9000"] }
routes:
)";

}  // namespace

TEST_CASE("on_limit: reject by default, delay with its max_delay_ms", "[config]") {
  auto c = parse_ok(kOnLimitHead + "  - { name: a, match: { path_prefix: / }, upstream: app }");
  CHECK(c->routes[0].on_limit == RouteConfig::OnLimit::kReject);
  CHECK(c->routes[0].max_delay == Millis(0));

  c = parse_ok(kOnLimitHead +
               "  - { name: a, match: { path_prefix: / }, upstream: app, on_limit: delay, "
               "max_delay_ms: 250 }");
  CHECK(c->routes[0].on_limit == RouteConfig::OnLimit::kDelay);
  CHECK(c->routes[0].max_delay == Millis(250));

  c = parse_ok(kOnLimitHead +
               "  - { name: a, match: { path_prefix: / }, upstream: app, on_limit: reject, "
               "max_delay_ms: 0 }");
  CHECK(c->routes[0].on_limit == RouteConfig::OnLimit::kReject);
}

}  // namespace sluice
