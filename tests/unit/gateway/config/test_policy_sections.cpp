// Configuration of per-request policies: a route's cost_header, max_cost and
// reject reply, the exemptions section, and a limit's ipv6_prefix.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "support/config_text.hpp"

namespace sluice {
namespace {

using testing::parse;
using testing::parse_ok;

const std::string kLimited = R"(upstreams:
  app: { servers: ["127.0.0.1:9000"] }
limits:
  per_ip: { key: ip, capacity: 20, refill_per_second: 5 }
routes:
  - name: api
    match: { path_prefix: / }
    upstream: app
    limits: [per_ip]
)";

}  // namespace

TEST_CASE("policy keys: defaults", "[config][policies]") {
  const auto c = parse_ok(kLimited);
  const auto& route = c->routes[0];
  CHECK(route.cost_header.empty());
  CHECK(route.max_cost == 0);
  CHECK(route.reject.status == 429);
  CHECK(route.reject.body.empty());
  CHECK(c->limits[0].ipv6_prefix == 64);
  CHECK(c->exemptions.client_cidrs.empty());
  CHECK(c->exemptions.plans.empty());
}

TEST_CASE("policy keys: values as read", "[config][policies]") {
  const auto c = parse_ok(kLimited + R"(    cost_header: X-Cost
    max_cost: 20
    reject: { status: 503, body: '{"error":"slow down"}' }
exemptions:
  client_cidrs: ["10.0.0.0/8", "2001:db8::/32"]
  plans: [free]
)");
  const auto& route = c->routes[0];
  CHECK(route.cost_header == "X-Cost");
  CHECK(route.max_cost == 20);
  CHECK(route.reject.status == 503);
  CHECK(route.reject.body == R"({"error":"slow down"})");
  CHECK(route.reject.content_type == "application/json");  // the default with a body
  REQUIRE(c->exemptions.client_cidrs.size() == 2);
  CHECK(c->exemptions.client_cidrs[1].to_string() == "2001:db8::/32");
  CHECK(c->exemptions.plans == std::vector<std::string>{"free"});

  const auto text = parse_ok(kLimited + "    reject: { body: busy, content_type: text/plain }\n");
  CHECK(text->routes[0].reject.status == 429);
  CHECK(text->routes[0].reject.content_type == "text/plain");

  const auto prefix = parse_ok(R"(upstreams:
  app: { servers: ["127.0.0.1:9000"] }
limits:
  per_net: { key: ip, capacity: 20, refill_per_second: 5, ipv6_prefix: 48 }
routes: []
)");
  CHECK(prefix->limits[0].ipv6_prefix == 48);
}

TEST_CASE("reject body: at most 64 KiB", "[config][policies]") {
  const std::string fits(65536, 'x');
  CHECK(parse_ok(kLimited + "    reject: { body: " + fits + " }\n")->routes[0].reject.body == fits);
  const auto result = parse(kLimited + "    reject: { body: " + fits + "y }\n");
  CHECK(result.errors ==
        std::vector<std::string>{"test.yaml:10: routes[0].reject.body: longer than 65536 bytes"});
}

TEST_CASE("max_cost 0 means the smallest capacity and is not checked", "[config][policies]") {
  const auto c = parse_ok(kLimited + "    cost_header: X-Cost\n    max_cost: 0\n");
  CHECK(c->routes[0].max_cost == 0);
}

TEST_CASE("warning: a cost header with \"_\" is dropped before the limiter sees it",
          "[config][policies]") {
  const auto result = parse(kLimited + "    cost_header: X_Cost\n");
  REQUIRE(result.config);
  REQUIRE(result.warnings.size() == 1);
  CHECK(result.warnings[0].find("header \"X_Cost\" has \"_\" in its name") != std::string::npos);
}

}  // namespace sluice
