// The rate-limit middleware on a route with on_limit: delay, against the fake
// limiter: the max wait it asks for, a reserved request that goes after its
// wait (on a real timer of the test's io_context), a client that leaves while
// waiting or while the limiter decides (refunded, counted), and the series it
// seeds.
#include <catch2/catch.hpp>

#include <chrono>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/metrics.hpp"
#include "middleware/ratelimit/rate_limit_middleware.hpp"
#include "support/rate_limit_harness.hpp"

using namespace sluice;

using testing::Harness;

namespace {

constexpr auto kDelayLabels = "route=\"r\",limit=\"per_key\",decision=\"delayed\"";

std::shared_ptr<const Config> delay_config(int max_delay_ms = 500) {
  auto config = std::make_shared<Config>(*testing::make_config(FailureMode::kOpen));
  config->routes[0].on_limit = RouteConfig::OnLimit::kDelay;
  config->routes[0].max_delay = Millis(max_delay_ms);
  return config;
}

// Admitted after reserving: the request may go in `wait` seconds.
RateDecision reserved(double wait) {
  RateDecision d = testing::decision(true, -1, wait, 5 + wait);
  d.limits[0].sufficient = false;
  d.limits[0].wait_seconds = wait;
  d.delay_seconds = wait;
  return d;
}

// Runs handlers until the middleware completed (bounded: about 10 s).
void run_until_done(Harness& h) {
  h.io.restart();
  for (int i = 0; i < 200 && h.done_calls == 0; ++i) {
    h.io.run_one_for(std::chrono::milliseconds(50));
  }
}

std::uint64_t delay_count(Harness& h) {
  return h.metrics.histogram_ref("sluice_ratelimit_delay_seconds", "route=\"r\"").count;
}

}  // namespace

TEST_CASE("delay route: enforced limits may wait up to max_delay, the client is watched",
          "[ratelimit][middleware][delay]") {
  Harness h(delay_config(500));
  h.start();
  REQUIRE(h.limiter->calls.size() == 1);
  CHECK(h.limiter->calls[0].descriptors[0].max_wait_seconds == 0.5);
  CHECK(h.gone);  // watched from the start: a client may leave during the call
  h.limiter->complete(h.io, {}, testing::decision(true, 8, 0, 1));
  h.run();
  CHECK(h.done_calls == 1);
  CHECK_FALSE(h.reply);
  CHECK(delay_count(h) == 0);  // not delayed
}

TEST_CASE("delay route: its decision is always awaited, never taken at once",
          "[ratelimit][middleware][delay]") {
  Harness h(delay_config(500));
  h.limiter->at_once = testing::decision(true, 8, 0, 1);
  h.start();
  CHECK(h.step == MiddlewareStep::kPending);
  CHECK(h.limiter->answered_at_once == 0);
  h.limiter->complete(h.io, {}, reserved(0.05));
  run_until_done(h);
  CHECK(h.done_calls == 1);
  CHECK(h.metric("sluice_ratelimit_decisions_total", kDelayLabels) == 1);
}

TEST_CASE("reject route: no waiting, no watch", "[ratelimit][middleware][delay]") {
  Harness h(testing::make_config(FailureMode::kOpen));
  h.start();
  REQUIRE(h.limiter->calls.size() == 1);
  CHECK(h.limiter->calls[0].descriptors[0].max_wait_seconds == 0);
  CHECK_FALSE(h.gone);
  h.limiter->complete(h.io, {}, testing::decision(true, 8, 0, 1));
  h.run();
}

TEST_CASE("a reserved request continues after its wait, counted delayed and in the histogram",
          "[ratelimit][middleware][delay]") {
  Harness h(delay_config(500));
  h.start();
  h.limiter->complete(h.io, {}, reserved(0.05));
  h.io.restart();
  h.io.run_one();  // the decision: the wait starts, nothing completes yet
  CHECK(h.done_calls == 0);
  CHECK(h.metric("sluice_ratelimit_decisions_total", kDelayLabels) == 1);
  run_until_done(h);
  CHECK(h.done_calls == 1);
  CHECK_FALSE(h.reply);  // forwarded, no 429
  CHECK(h.header("X-RateLimit-Remaining") == "0");
  CHECK(h.header("Retry-After") == std::nullopt);
  CHECK(delay_count(h) == 1);
  CHECK(h.metrics.histogram_ref("sluice_ratelimit_delay_seconds", "route=\"r\"").sum >= 0.05);
  CHECK(h.limiter->refunds.empty());
  CHECK(h.metric("sluice_ratelimit_delay_abandoned_total", "route=\"r\"") == 0);
}

TEST_CASE("a client that leaves while waiting: refunded, counted, completed at once",
          "[ratelimit][middleware][delay]") {
  Harness h(delay_config(60'000));
  h.start();
  h.limiter->complete(h.io, {}, reserved(30));  // far longer than the test runs
  h.io.restart();
  h.io.run_one();
  CHECK(h.done_calls == 0);
  REQUIRE(h.gone);
  h.gone();
  run_until_done(h);
  CHECK(h.done_calls == 1);
  CHECK_FALSE(h.reply);
  REQUIRE(h.limiter->refunds.size() == 1);
  CHECK(h.limiter->refunds[0].bucket.limit == "per_key");
  CHECK(h.limiter->refunds[0].tokens == 2);  // the route's cost
  CHECK(h.metric("sluice_ratelimit_delay_abandoned_total", "route=\"r\"") == 1);
  CHECK(delay_count(h) == 0);
}

TEST_CASE("a client that leaves while the limiter decides: a reservation is refunded at once",
          "[ratelimit][middleware][delay]") {
  Harness h(delay_config(500));
  h.start();
  h.gone();
  h.limiter->complete(h.io, {}, reserved(0.4));
  h.run();
  CHECK(h.done_calls == 1);
  REQUIRE(h.limiter->refunds.size() == 1);
  CHECK(h.metric("sluice_ratelimit_delay_abandoned_total", "route=\"r\"") == 1);
}

TEST_CASE("a refusal beyond max_delay is a 429 as on a reject route",
          "[ratelimit][middleware][delay]") {
  Harness h(delay_config(500));
  h.start();
  h.limiter->complete(h.io, {}, testing::decision(false, 0, 3, 5));
  h.run();
  REQUIRE(h.reply);
  CHECK(h.reply->status == 429);
  CHECK(h.metric("sluice_ratelimit_decisions_total",
                 "route=\"r\",limit=\"per_key\",decision=\"limited\"") == 1);
  CHECK(h.metric("sluice_ratelimit_decisions_total", kDelayLabels) == 0);
}

TEST_CASE("seeded: delayed, the histogram and abandoned waits on delay routes only",
          "[ratelimit][middleware][delay]") {
  const auto seeded = [](const Config& config) {
    MetricsShard shard;
    seed_rate_limit_metrics(config, shard);
    MetricsSnapshot snapshot;
    shard.merge_into(snapshot);
    return snapshot;
  };
  auto delay = seeded(*delay_config());
  CHECK(delay.has("sluice_ratelimit_decisions_total", kDelayLabels));
  CHECK(delay.has("sluice_ratelimit_decisions_total",
                  "route=\"r\",limit=\"per_key\",decision=\"limited\""));
  CHECK_FALSE(delay.has("sluice_ratelimit_decisions_total",
                        "route=\"r\",limit=\"per_key\",decision=\"shadow_limited\""));
  CHECK(delay.has("sluice_ratelimit_delay_seconds", "route=\"r\""));
  CHECK(delay.has("sluice_ratelimit_delay_abandoned_total", "route=\"r\""));

  auto reject = seeded(*testing::make_config(FailureMode::kOpen));
  CHECK_FALSE(reject.has("sluice_ratelimit_decisions_total", kDelayLabels));
  CHECK_FALSE(reject.has("sluice_ratelimit_delay_seconds", "route=\"r\""));

  auto shadow_config = std::make_shared<Config>(*testing::make_config(FailureMode::kOpen));
  shadow_config->limits[0].shadow = true;
  auto shadow = seeded(*shadow_config);
  CHECK(shadow.has("sluice_ratelimit_decisions_total",
                   "route=\"r\",limit=\"per_key\",decision=\"shadow_limited\""));
  CHECK(shadow.has("sluice_ratelimit_decisions_total",
                   "route=\"r\",limit=\"per_key\",decision=\"allowed\""));
  CHECK_FALSE(shadow.has("sluice_ratelimit_decisions_total",
                         "route=\"r\",limit=\"per_key\",decision=\"limited\""));
}
