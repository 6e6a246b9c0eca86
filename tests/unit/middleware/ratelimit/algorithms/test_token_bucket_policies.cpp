// The token-bucket twin with shadow buckets and max waits (reservations), and
// the fallback store deciding with them: a manual clock, no sleeping.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "middleware/ratelimit/algorithms/limits.hpp"
#include "middleware/ratelimit/local/fallback_store.hpp"

namespace token_bucket_policies_test {

using sluice::BucketState;
using sluice::LimitDescriptor;
using sluice::RateDecision;

constexpr std::int64_t kSecond = 1'000'000;
constexpr std::int64_t kNow = 1'700'000'000 * kSecond;

LimitDescriptor limit(std::string name, double capacity, double rate, double max_wait = 0,
                      bool shadow = false) {
  LimitDescriptor d{std::move(name), {}, capacity, rate};
  d.max_wait_seconds = max_wait;
  d.shadow = shadow;
  return d;
}

// A bucket holding `tokens` as of kNow.
BucketState holding(double tokens) {
  return BucketState{tokens, kNow, true};
}


TEST_CASE("token bucket policies: a short bucket within its max wait is reserved",
          "[ratelimit][token_bucket][policies]") {
  const std::vector<LimitDescriptor> limits = {limit("a", 10, 2, 1.5)};
  std::vector<BucketState> states = {holding(0.5)};
  const RateDecision d = sluice::decide_limits(states, limits, 2, kNow);
  REQUIRE(d.allowed);
  CHECK_FALSE(d.limits[0].sufficient);
  CHECK(d.limits[0].wait_seconds == 0.75);  // (2 - 0.5) / 2
  CHECK(d.delay_seconds == 0.75);
  CHECK(d.limits[0].remaining == -1.5);  // below zero by the wait's refill
  CHECK(d.limits[0].seconds_to_cost == 1.75);
  CHECK(d.limits[0].leased == 0);
  CHECK(states[0].tokens == -1.5);

  // The next one waits longer than 1.5 s: denied, nothing written.
  const RateDecision next = sluice::decide_limits(states, limits, 2, kNow);
  CHECK_FALSE(next.allowed);
  CHECK(next.delay_seconds == 0);
  CHECK(next.limits[0].wait_seconds == 0);
  CHECK(states[0].tokens == -1.5);

  // After 1 s the bucket holds 0.5 again: reservable once more.
  const RateDecision later = sluice::decide_limits(states, limits, 2, kNow + kSecond);
  CHECK(later.allowed);
  CHECK(later.delay_seconds == 0.75);
}

TEST_CASE("token bucket policies: no reservation without a max wait, or above capacity",
          "[ratelimit][token_bucket][policies]") {
  std::vector<BucketState> states = {holding(0.5)};
  CHECK_FALSE(sluice::decide_limits(states, std::vector{limit("a", 10, 2)}, 2, kNow).allowed);
  CHECK_FALSE(sluice::decide_limits(states, std::vector{limit("a", 10, 2, 100)}, 11, kNow).allowed);
  CHECK_FALSE(sluice::decide_limits(states, std::vector{limit("a", 10, 0, 100)}, 2, kNow).allowed);
  CHECK(states[0].tokens == 0.5);
}

TEST_CASE("token bucket policies: a lease only from a bucket that had the tokens",
          "[ratelimit][token_bucket][policies]") {
  std::vector<LimitDescriptor> limits = {limit("a", 10, 2, 5), limit("b", 10, 2)};
  limits[0].lease_want = 4;
  limits[1].lease_want = 4;
  std::vector<BucketState> states = {holding(1), holding(9)};
  const RateDecision d = sluice::decide_limits(states, limits, 2, kNow);
  REQUIRE(d.allowed);
  CHECK(d.limits[0].leased == 0);  // floor((1 - 2) / 2) would be negative
  CHECK(d.limits[0].wait_seconds == 0.5);
  CHECK(d.limits[1].leased == 3);  // floor((9 - 2) / 2)
  CHECK(d.limits[1].wait_seconds == 0);
  CHECK(states[0].tokens == -1);
  CHECK(states[1].tokens == 4);
}

TEST_CASE("token bucket policies: a shadow bucket never denies, and is debited only if it can be",
          "[ratelimit][token_bucket][policies]") {
  const std::vector<LimitDescriptor> limits = {limit("enforced", 10, 1),
                                               limit("shadow", 10, 1, 0, true)};
  SECTION("short shadow: admitted, the enforced one debited, the shadow one untouched") {
    std::vector<BucketState> states = {holding(5), holding(0.5)};
    const RateDecision d = sluice::decide_limits(states, limits, 1, kNow);
    REQUIRE(d.allowed);
    CHECK(d.limits[0].sufficient);
    CHECK_FALSE(d.limits[1].sufficient);
    CHECK(d.limits[1].remaining == 0.5);
    CHECK(d.limits[1].wait_seconds == 0);
    CHECK(d.delay_seconds == 0);
    CHECK(states[0].tokens == 4);
    CHECK(states[1].tokens == 0.5);
  }
  SECTION("both sufficient: both debited") {
    std::vector<BucketState> states = {holding(5), holding(3)};
    REQUIRE(sluice::decide_limits(states, limits, 1, kNow).allowed);
    CHECK(states[0].tokens == 4);
    CHECK(states[1].tokens == 2);
  }
  SECTION("short enforced: denied, neither debited, as if the shadow one were absent") {
    std::vector<BucketState> states = {holding(0.5), holding(5)};
    const RateDecision d = sluice::decide_limits(states, limits, 1, kNow);
    CHECK_FALSE(d.allowed);
    CHECK(d.limits[1].sufficient);
    CHECK(states[0].tokens == 0.5);
    CHECK(states[1].tokens == 5);
  }
  SECTION("a shadow bucket alone: always admitted") {
    std::vector<BucketState> states = {holding(0)};
    CHECK(sluice::decide_limits(states, std::vector{limits[1]}, 1, kNow).allowed);
    CHECK(states[0].tokens == 0);
  }
}

TEST_CASE("token bucket policies: the fallback store reserves and keeps shadow buckets apart",
          "[ratelimit][token_bucket][policies][fallback]") {
  std::int64_t now = kNow;
  sluice::FallbackStore store{100, [&now] { return now; }};
  const std::vector<LimitDescriptor> limits = {limit("a", 2, 1, 1), limit("s", 1, 1, 0, true)};
  CHECK(store.decide(limits, 1).allowed);  // a: 1 left; s: 0 left
  CHECK(store.decide(limits, 1).allowed);  // a: 0 left; s short, untouched
  const RateDecision reserved = store.decide(limits, 1);
  REQUIRE(reserved.allowed);
  CHECK(reserved.delay_seconds == 1);
  CHECK(reserved.local == sluice::LocalDecision::kFallback);
  CHECK(store.state(limits[0]).tokens == -1);
  CHECK(store.state(limits[1]).tokens == 0);
  CHECK_FALSE(store.decide(limits, 1).allowed);  // a 2 s wait
}

}  // namespace token_bucket_policies_test
