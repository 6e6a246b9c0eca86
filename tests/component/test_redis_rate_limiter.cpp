// The Redis limiter's circuit breaker against a real redis-server: the
// unavailable time it reports with errors, and the probe that closes an open
// breaker when no decision is asked (an idle instance). The io_context runs in
// bounded slices and conditions are polled; nothing sleeps for a result.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "support/io_loop.hpp"
#include "support/redis_server_fixture.hpp"
#include "upstream/redis/single_node_client.hpp"

namespace redis_rate_limiter_test {

using namespace std::chrono_literals;
using namespace sluice;
using sluice::test::RedisServerFixture;
using Clock = std::chrono::steady_clock;

using sluice::test::Loop;

struct Outcome {
  std::error_code ec;
  RateDecision decision;
};

Outcome decide(Loop& loop, RedisRateLimiter& limiter) {
  std::optional<Outcome> outcome;
  LimitDescriptor d;
  d.limit = "lim";
  d.key_hash = key_hash("k");
  d.capacity = 10;
  d.refill_per_second = 1;
  limiter.decide({d}, 1, [&](std::error_code ec, RateDecision decision) {
    outcome = Outcome{ec, std::move(decision)};
  });
  REQUIRE(loop.run_until([&] { return outcome.has_value(); }));
  return *outcome;
}

double gauge(RedisRateLimiter& limiter, MetricsShard& metrics, const char* name) {
  limiter.export_metrics();
  MetricsSnapshot snapshot;
  metrics.merge_into(snapshot);
  return snapshot.value(name, "");
}


TEST_CASE("limiter: an open breaker closes by itself once Redis answers again",
          "[ratelimit][breaker][redis]") {
  RedisServerFixture server;
  Loop loop;
  MetricsShard metrics;
  RedisConfig config;
  config.host = "127.0.0.1";
  config.port = server.port();
  config.timeout = 500ms;
  config.connect_timeout = 1000ms;
  config.circuit_breaker.failures = 2;
  config.circuit_breaker.open = 1000ms;  // the refused decision below comes well within it
  auto make_client = redis::single_node_factory(loop.io.get_executor());
  RedisRateLimiter limiter(loop.io.get_executor(), config, metrics,
                           make_client(redis_options(config)), make_client);
  limiter.connect();
  REQUIRE(loop.run_until([&] { return limiter.redis_ready(); }));
  REQUIRE_FALSE(decide(loop, limiter).ec);

  server.stop();
  REQUIRE(loop.run_until([&] { return !limiter.redis_ready(); }));
  // A failure that leaves the breaker closed: nothing known about the outage.
  auto first = decide(loop, limiter);
  REQUIRE(first.ec);
  CHECK(first.decision.unavailable_seconds == 0);
  CHECK_FALSE(limiter.circuit_open());
  // The failure that opens it: the whole open period.
  auto second = decide(loop, limiter);
  REQUIRE(second.ec);
  CHECK(limiter.circuit_open());
  CHECK(second.decision.unavailable_seconds == Approx(1.0).margin(0.001));
  // Refused while open, with what is left of the period.
  auto refused = decide(loop, limiter);
  CHECK(refused.ec == make_error_code(LimiterError::kCircuitOpen));
  CHECK(refused.decision.unavailable_seconds > 0);
  CHECK(refused.decision.unavailable_seconds <= 1.0);
  CHECK(gauge(limiter, metrics, "sluice_redis_circuit_open") == 1);

  // Redis still down, no decisions: the breaker stays open over several periods.
  const auto opened = Clock::now();
  CHECK_FALSE(loop.run_until([&] { return !limiter.circuit_open(); }, 2500ms));
  CHECK(Clock::now() - opened >= 2500ms);
  CHECK(gauge(limiter, metrics, "sluice_redis_circuit_open") == 1);

  // Redis back; still no decision asked: the probe closes the breaker.
  const auto commands_before = gauge(limiter, metrics, "sluice_redis_commands_total");
  server.start();
  REQUIRE(loop.run_until([&] { return limiter.redis_ready() && !limiter.circuit_open(); },
                         1000ms + 2000ms + 2000ms));  // open period + reconnect backoff + margin
  CHECK(gauge(limiter, metrics, "sluice_redis_circuit_open") == 0);
  CHECK(gauge(limiter, metrics, "sluice_redis_up") == 1);
  CHECK(gauge(limiter, metrics, "sluice_redis_commands_total") > commands_before);
  // The next decision goes to Redis at once.
  CHECK_FALSE(decide(loop, limiter).ec);
  limiter.close();
}

}  // namespace redis_rate_limiter_test
