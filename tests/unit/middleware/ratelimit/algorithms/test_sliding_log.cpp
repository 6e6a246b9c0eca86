// The sliding-log twin with a manual clock: no span of the window ever holds
// more than capacity (the burst on both sides of a boundary that a sliding
// window lets through twice), whole units, waits until the oldest entries
// leave, all or nothing with a token bucket.
#include <catch2/catch.hpp>
#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

#include "middleware/ratelimit/algorithms/limits.hpp"

namespace sliding_log_test {

constexpr std::int64_t kMs = 1000;
constexpr std::int64_t kSecond = 1'000'000;
constexpr std::int64_t kStart = 1'764'000'000LL * kSecond;

sluice::LimitDescriptor log_limit(double capacity, double window_seconds) {
  sluice::LimitDescriptor d{"log", {}, capacity, 0};
  d.algorithm = sluice::LimitAlgorithm::kSlidingLog;
  d.window_seconds = window_seconds;
  return d;
}

TEST_CASE("sliding log: a burst on both sides of a boundary gets capacity, not twice it",
          "[sliding_log][unit]") {
  std::vector<sluice::LimitDescriptor> limits{log_limit(20, 1)};
  std::vector<sluice::BucketState> states(1);
  std::deque<std::int64_t> admitted;
  int total = 0;
  // 40 requests at 0.9 s, 40 at 1.1 s, then one every 10 ms for 3 s.
  std::vector<std::int64_t> times;
  for (int i = 0; i < 40; ++i) times.push_back(kStart + 900 * kMs);
  for (int i = 0; i < 40; ++i) times.push_back(kStart + 1100 * kMs);
  for (std::int64_t t = 1110; t < 4000; t += 10) times.push_back(kStart + t * kMs);
  for (const std::int64_t t : times) {
    const auto d = sluice::decide_limits(states, limits, 1, t);
    if (!d.allowed) continue;
    ++total;
    admitted.push_back(t);
    while (admitted.front() <= t - kSecond) admitted.pop_front();
    REQUIRE(admitted.size() <= 20);  // any span of the window, ending at an admission
  }
  // 20 at 0.9 s, none at 1.1 s (the 0.9 s ones are still in the window); from
  // 1.9 s, as those leave, 20 of the steady requests (1.90-2.09 s), 20 more a
  // second later, and 10 at 3.90-3.99 s.
  CHECK(total == 20 + 20 + 20 + 10);
}

TEST_CASE("sliding log: whole units, the wait until the oldest leave, never reserved",
          "[sliding_log][unit]") {
  std::vector<sluice::LimitDescriptor> limits{log_limit(5, 10)};
  limits[0].max_wait_seconds = 100;  // a sliding log waits for nobody
  std::vector<sluice::BucketState> states(1);
  // 1.5 counts as 2 units.
  auto d = sluice::decide_limits(states, limits, 1.5, kStart);
  REQUIRE(d.allowed);
  CHECK(d.limits[0].remaining == 3);
  CHECK(states[0].log.size() == 2);
  CHECK(d.limits[0].seconds_to_full == 10);
  d = sluice::decide_limits(states, limits, 2, kStart + 4 * kSecond);
  REQUIRE(d.allowed);
  CHECK(d.limits[0].remaining == 1);
  CHECK(d.limits[0].seconds_to_cost == 6);  // 2 more fit once the first 2 leave
  CHECK(d.limits[0].seconds_to_full == 10);  // the entries of 4 s leave at 14 s
  d = sluice::decide_limits(states, limits, 3, kStart + 5 * kSecond);
  CHECK_FALSE(d.allowed);
  CHECK(d.delay_seconds == 0);
  CHECK(d.limits[0].seconds_to_cost == 5);  // 3 fit once the two entries of 0 s leave
  CHECK(states[0].log.size() == 4);         // a denial logs nothing
  CHECK(sluice::decide_limits(states, limits, 6, kStart + 5 * kSecond).limits[0].seconds_to_cost ==
        std::numeric_limits<double>::infinity());
  // At 10 s the first two have left.
  d = sluice::decide_limits(states, limits, 3, kStart + 10 * kSecond);
  CHECK(d.allowed);
  CHECK(d.limits[0].remaining == 0);
}

TEST_CASE("sliding log: all or nothing with a token bucket", "[sliding_log][unit]") {
  sluice::LimitDescriptor bucket{"b", {}, 1, 0.001};
  std::vector<sluice::LimitDescriptor> limits{log_limit(10, 60), bucket};
  std::vector<sluice::BucketState> states(2);
  REQUIRE(sluice::decide_limits(states, limits, 1, kStart).allowed);
  const auto denied = sluice::decide_limits(states, limits, 1, kStart + kSecond);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.limits[0].sufficient);
  CHECK(states[0].log.size() == 1);
}

}  // namespace sliding_log_test
