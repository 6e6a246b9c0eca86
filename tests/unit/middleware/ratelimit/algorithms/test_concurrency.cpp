// The concurrency twin with a manual clock: one slot per request whatever its
// cost, a denial while every slot is held (Retry-After 1, never reserved),
// slots whose lease ended come back; slot numbers are distinct whole numbers.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "middleware/ratelimit/algorithms/limits.hpp"

namespace concurrency_test {

constexpr std::int64_t kSecond = 1'000'000;
constexpr std::int64_t kStart = 1'764'000'000LL * kSecond;

sluice::LimitDescriptor slots(double capacity, double lease_ms) {
  sluice::LimitDescriptor d{"in_flight", {}, capacity, 0};
  d.algorithm = sluice::LimitAlgorithm::kConcurrency;
  d.lease_ms = lease_ms;
  return d;
}

TEST_CASE("concurrency twin: a slot per request, denied when all are held, back when leases end",
          "[concurrency][unit]") {
  std::vector<sluice::LimitDescriptor> limits{slots(2, 30000)};
  limits[0].max_wait_seconds = 100;  // waits for nobody
  std::vector<sluice::BucketState> states(1);
  auto d = sluice::decide_limits(states, limits, 50, kStart);  // cost does not matter
  REQUIRE(d.allowed);
  CHECK(d.limits[0].remaining == 1);
  CHECK(d.limits[0].seconds_to_cost == 0);
  d = sluice::decide_limits(states, limits, 1, kStart + kSecond);
  REQUIRE(d.allowed);
  CHECK(d.limits[0].remaining == 0);
  CHECK(d.limits[0].seconds_to_cost == 1);
  d = sluice::decide_limits(states, limits, 1, kStart + 2 * kSecond);
  CHECK_FALSE(d.allowed);
  CHECK(d.delay_seconds == 0);
  CHECK(d.limits[0].seconds_to_cost == 1);
  REQUIRE(states[0].log.size() == 2);
  CHECK(states[0].log[0] == static_cast<double>(kStart + 30 * kSecond));
  // The first lease ends at 30 s: a slot is free again.
  CHECK(sluice::decide_limits(states, limits, 1, kStart + 30 * kSecond).allowed);
}

TEST_CASE("concurrency: slot numbers are distinct whole numbers below 2^53", "[concurrency][unit]") {
  std::set<double> seen;
  for (int i = 0; i < 10000; ++i) {
    const double n = sluice::next_slot_number();
    CHECK(n == std::floor(n));
    CHECK(n < 9007199254740992.0);
    seen.insert(n);
  }
  CHECK(seen.size() == 10000);
}

}  // namespace concurrency_test
