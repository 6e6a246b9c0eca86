// The rate-limit middleware's per-request policies against the fake limiter:
// the cost taken from a header, exemptions by client CIDR and by plan, and a
// route's custom reject reply.
#include <catch2/catch.hpp>

#include <string>

#include "support/rate_limit_harness.hpp"

using namespace sluice;
using namespace sluice::testing;

namespace {

std::shared_ptr<const Config> policy_config(const std::string& route_extra,
                                            const std::string& top_extra = "") {
  auto result = parse_config(R"(
api_keys:
  header: X-API-Key
  consumers:
    - { key: secret-key, plan: internal }
    - { key: other-key, plan: free }
upstreams:
  u: { servers: ["127.0.0.1:9"] }
limits:
  per_key: { key: api_key, capacity: 10, refill_per_second: 2 }
  per_ip: { key: ip, capacity: 30, refill_per_second: 2 }
routes:
  - name: r
    match: { path_prefix: "/" }
    upstream: u
    limits: [per_key, per_ip]
    cost: 2
)" + route_extra + top_extra,
                             "t.yaml");
  INFO((result.errors.empty() ? std::string() : result.errors[0]));
  REQUIRE(result.config);
  return result.config;
}

RateDecision two_limits(bool allowed) {
  RateDecision d = decision(allowed, allowed ? 3 : 1, allowed ? 0 : 2.5, 4);
  d.limits.push_back(LimitState{true, 20, 0, 3});
  return d;
}

}  // namespace

TEST_CASE("cost header: the decision, headers and body use the request's cost",
          "[ratelimit][middleware][cost]") {
  Harness h(policy_config("    cost_header: X-Cost\n"));
  SECTION("a valid value") {
    h.headers["X-Cost"] = "7";
    h.start();
    REQUIRE(h.limiter->calls.size() == 1);
    CHECK(h.limiter->calls[0].cost == 7);
  }
  SECTION("clamped to the smallest capacity") {
    h.headers["X-Cost"] = "500";
    h.start();
    REQUIRE(h.limiter->calls.size() == 1);
    CHECK(h.limiter->calls[0].cost == 10);
  }
  SECTION("missing or invalid: the route's cost") {
    h.headers["X-Cost"] = "seven";
    h.start();
    REQUIRE(h.limiter->calls.size() == 1);
    CHECK(h.limiter->calls[0].cost == 2);
  }
  SECTION("repeated: refused with 400 before the limiter is asked") {
    h.headers["X-Cost"] = "1";
    h.headers.erase("X-API-Key");
    h.lines = 2;
    h.start();
    CHECK(h.step == MiddlewareStep::kRespond);
    REQUIRE(h.reply);
    CHECK(h.reply->status == 400);
    CHECK(h.limiter->calls.empty());
    CHECK(h.metric("sluice_ratelimit_rejected_total",
                   "route=\"r\",reason=\"duplicate_identity\"") == 1);
  }
}

TEST_CASE("exemptions: no limiter call, no headers, counted", "[ratelimit][middleware][exempt]") {
  const std::string exemptions =
      "exemptions:\n  client_cidrs: [\"10.0.0.0/8\"]\n  plans: [internal]\n";
  SECTION("a client inside a CIDR") {
    Harness h(policy_config("", exemptions));
    h.headers.clear();
    seed_rate_limit_metrics(*h.ctx.config, h.metrics);
    CHECK(h.metric("sluice_ratelimit_exempt_total", "route=\"r\",reason=\"plan\"") == 0);
    h.start();
    CHECK(h.step == MiddlewareStep::kContinue);
    CHECK(h.limiter->calls.empty());
    CHECK(h.ctx.response_headers.empty());
    CHECK(h.metric("sluice_ratelimit_exempt_total", "route=\"r\",reason=\"cidr\"") == 1);
  }
  SECTION("a key of an exempt plan") {
    Harness h(policy_config("", exemptions));
    h.ctx.client_ip = *parse_ip("192.0.2.1");
    h.start();
    CHECK(h.step == MiddlewareStep::kContinue);
    CHECK(h.limiter->calls.empty());
    CHECK(h.metric("sluice_ratelimit_exempt_total", "route=\"r\",reason=\"plan\"") == 1);
  }
  SECTION("neither: limited as usual") {
    Harness h(policy_config("", exemptions));
    h.ctx.client_ip = *parse_ip("192.0.2.1");
    h.headers["X-API-Key"] = "other-key";
    h.start();
    CHECK(h.step == MiddlewareStep::kPending);
    CHECK(h.limiter->calls.size() == 1);
    h.limiter->complete(h.io, {}, two_limits(true));
    h.run();
    CHECK(h.done_calls == 1);
  }
}

TEST_CASE("reject: a route's own status and body, rate-limit headers kept",
          "[ratelimit][middleware][reject]") {
  SECTION("status and body") {
    Harness h(policy_config("    reject: { status: 503, body: '{\"error\":\"slow down\"}' }\n"));
    h.start();
    h.limiter->complete(h.io, {}, two_limits(false));
    h.run();
    REQUIRE(h.reply);
    CHECK(h.reply->status == 503);
    CHECK(h.reply->body == R"({"error":"slow down"})");
    CHECK(h.reply->content_type == "application/json");
    CHECK(h.header("Retry-After") == "3");
    CHECK(h.header("X-RateLimit-Remaining") == "1");
  }
  SECTION("a status alone keeps the problem document, with that status") {
    Harness h(policy_config("    reject: { status: 503 }\n"));
    h.start();
    h.limiter->complete(h.io, {}, two_limits(false));
    h.run();
    REQUIRE(h.reply);
    CHECK(h.reply->status == 503);
    CHECK(h.reply->content_type == "application/problem+json");
    CHECK(h.reply->body.find(R"("status":503,"violated-policies":["per_key"])") !=
          std::string::npos);
  }
  SECTION("a text body") {
    Harness h(policy_config(
        "    reject: { status: 429, body: \"slow down\\n\", content_type: text/plain }\n"));
    h.start();
    h.limiter->complete(h.io, {}, two_limits(false));
    h.run();
    REQUIRE(h.reply);
    CHECK(h.reply->status == 429);
    CHECK(h.reply->body == "slow down\n");
    CHECK(h.reply->content_type == "text/plain");
  }
}
