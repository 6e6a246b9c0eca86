// The sliding-window twin with a manual clock: the counter approximation, its
// waits, reservations, shadow windows, and windows mixed with token buckets.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "middleware/ratelimit/algorithms/limits.hpp"

namespace sliding_window_test {

using sluice::BucketState;
using sluice::LimitDescriptor;
using sluice::RateDecision;

constexpr std::int64_t kSecond = 1'000'000;
// The start of a 60 s window.
constexpr std::int64_t kStart = 28'333'333LL * 60 * kSecond;

LimitDescriptor window(std::string name, double capacity, double seconds) {
  LimitDescriptor d{std::move(name), {}, capacity, 0};
  d.algorithm = sluice::LimitAlgorithm::kSlidingWindow;
  d.window_seconds = seconds;
  return d;
}

struct Window {
  std::vector<LimitDescriptor> limits;
  std::vector<BucketState> states;
  explicit Window(std::vector<LimitDescriptor> l) : limits(std::move(l)), states(limits.size()) {}
  RateDecision decide(std::int64_t now, double cost = 1) {
    return sluice::decide_limits(states, limits, cost, now);
  }
};


TEST_CASE("sliding window: capacity per window, then the previous window slides out",
          "[ratelimit][sliding_window]") {
  Window w({window("w", 10, 60)});
  for (int i = 0; i < 10; ++i) {
    const RateDecision d = w.decide(kStart + i * kSecond);
    REQUIRE(d.allowed);
    CHECK(d.limits[0].sufficient);
    CHECK(d.limits[0].remaining == 9 - i);
  }
  const RateDecision denied = w.decide(kStart + 10 * kSecond);
  CHECK_FALSE(denied.allowed);
  CHECK_FALSE(denied.limits[0].sufficient);
  CHECK(denied.limits[0].remaining == 0);
  // The next window starts with an estimate of 10, which must slide to 9: 6 s in.
  CHECK(denied.limits[0].seconds_to_cost == Approx(50 + 6));
  CHECK(denied.limits[0].seconds_to_full == Approx(110));
  CHECK(w.states[0].tokens == 10);  // nothing counted on a denial

  CHECK_FALSE(w.decide(kStart + 65 * kSecond).allowed);  // estimate 10 * 55/60 > 9
  const RateDecision next = w.decide(kStart + 66 * kSecond + 1000);
  REQUIRE(next.allowed);
  CHECK(w.states[0].previous == 10);
  CHECK(w.states[0].tokens == 1);
  CHECK(next.limits[0].remaining == Approx(0).margin(1e-3));
  // Half-way through the second window, 5 more of the first have slid out.
  int passed = 0;
  while (w.decide(kStart + 90 * kSecond).allowed) ++passed;
  CHECK(passed == 4);  // estimates 6, 7, 8 and 9 leave room for one more; 10 does not
}

TEST_CASE("sliding window: a window two windows old counts for nothing",
          "[ratelimit][sliding_window]") {
  Window w({window("w", 3, 1)});
  for (int i = 0; i < 3; ++i) REQUIRE(w.decide(kStart).allowed);
  CHECK_FALSE(w.decide(kStart).allowed);
  const RateDecision d = w.decide(kStart + 2 * kSecond);
  REQUIRE(d.allowed);
  CHECK(w.states[0].previous == 0);
  CHECK(w.states[0].tokens == 1);
  CHECK(d.limits[0].remaining == 2);
  CHECK(d.limits[0].seconds_to_full == 2);  // this window to its end, then the next
  CHECK(sluice::window_ttl_ms(1) == 2001);
  CHECK(sluice::window_ttl_ms(60) == 120001);
}

TEST_CASE("sliding window: cost above capacity never fits", "[ratelimit][sliding_window]") {
  Window w({window("w", 3, 1)});
  const RateDecision d = w.decide(kStart, 4);
  CHECK_FALSE(d.allowed);
  CHECK(d.limits[0].seconds_to_cost == std::numeric_limits<double>::infinity());
  CHECK_FALSE(w.states[0].exists);
}

TEST_CASE("sliding window: a wait within max wait is counted now and reported",
          "[ratelimit][sliding_window][policies]") {
  Window w({window("w", 2, 10)});
  w.limits[0].max_wait_seconds = 5;
  REQUIRE(w.decide(kStart).allowed);
  REQUIRE(w.decide(kStart).allowed);
  // Full: the count of 2 must slide to 1 in the next window, 5 s into it: 15 s away.
  CHECK_FALSE(w.decide(kStart + 5 * kSecond).allowed);
  const RateDecision reserved = w.decide(kStart + 10 * kSecond);
  REQUIRE(reserved.allowed);
  CHECK_FALSE(reserved.limits[0].sufficient);
  CHECK(reserved.limits[0].wait_seconds == Approx(5));
  CHECK(reserved.delay_seconds == Approx(5));
  CHECK(reserved.limits[0].remaining == Approx(-1));  // counted in the window it was admitted in
  CHECK(w.states[0].tokens == 1);
  CHECK(w.states[0].previous == 2);
}

TEST_CASE("sliding window: no reservation reaches into the next window",
          "[ratelimit][sliding_window][policies]") {
  // The count of this window leaves no room: the wait would end in the next
  // window, where a request counted now would weigh less than it should.
  Window w({window("w", 2, 10)});
  w.limits[0].max_wait_seconds = 100;
  REQUIRE(w.decide(kStart).allowed);
  REQUIRE(w.decide(kStart).allowed);
  const RateDecision d = w.decide(kStart + 9 * kSecond);
  CHECK_FALSE(d.allowed);
  CHECK(d.limits[0].seconds_to_cost == Approx(1 + 5));  // 1 s to the next window, 5 s into it
  CHECK(d.delay_seconds == 0);
  CHECK(w.states[0].tokens == 2);  // nothing counted
}

TEST_CASE("sliding window: shadow windows, and windows mixed with token buckets",
          "[ratelimit][sliding_window][policies]") {
  LimitDescriptor bucket{"tb", {}, 5, 1};
  SECTION("either denies; both are debited only when both fit") {
    Window w({window("w", 2, 60), bucket});
    REQUIRE(w.decide(kStart).allowed);
    REQUIRE(w.decide(kStart).allowed);
    const RateDecision d = w.decide(kStart);  // the window is full
    CHECK_FALSE(d.allowed);
    CHECK_FALSE(d.limits[0].sufficient);
    CHECK(d.limits[1].sufficient);
    CHECK(w.states[1].tokens == 3);                                // the bucket was not debited
    w.states[1] = BucketState{0.5, kStart + 120 * kSecond, true};  // now only the bucket is short
    CHECK_FALSE(w.decide(kStart + 120 * kSecond).allowed);
    CHECK(w.states[0].tokens == 2);
  }
  SECTION("a full shadow window neither denies nor counts") {
    Window w({window("w", 1, 60), bucket});
    w.limits[0].shadow = true;
    REQUIRE(w.decide(kStart).allowed);
    const RateDecision d = w.decide(kStart);
    REQUIRE(d.allowed);
    CHECK_FALSE(d.limits[0].sufficient);
    CHECK(w.states[0].tokens == 1);
    CHECK(w.states[1].tokens == 3);
  }
}

TEST_CASE("sliding window: a clock that went backwards keeps the stored window",
          "[ratelimit][sliding_window]") {
  Window w({window("w", 2, 1)});
  REQUIRE(w.decide(kStart + 5 * kSecond).allowed);
  const RateDecision d = w.decide(kStart + 3 * kSecond);
  REQUIRE(d.allowed);
  CHECK(w.states[0].tokens == 2);
  CHECK(w.states[0].timestamp_us == (kStart + 5 * kSecond) / kSecond);
  CHECK_FALSE(w.decide(kStart + 3 * kSecond).allowed);
}

}  // namespace sliding_window_test
