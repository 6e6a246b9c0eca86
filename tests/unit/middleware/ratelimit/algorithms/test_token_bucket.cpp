// The token-bucket twin, directly and through the local fallback store at a
// fleet size of 1 (the whole limit): a manual clock, no sleeping.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "middleware/ratelimit/algorithms/limits.hpp"
#include "middleware/ratelimit/local/fallback_store.hpp"

namespace token_bucket_test {

using sluice::BucketState;
using sluice::FallbackStore;
using sluice::LimitDescriptor;
using sluice::RateDecision;

constexpr std::int64_t kSecond = 1'000'000;

struct ManualClock {
  std::int64_t now_us = 1'700'000'000 * kSecond;
  void advance_ms(std::int64_t ms) { now_us += ms * 1000; }
};

LimitDescriptor limit(std::string name, double capacity, double rate) {
  return LimitDescriptor{name, {}, capacity, rate};
}

struct Fixture {
  ManualClock clock;
  FallbackStore store{FallbackStore::kDefaultMaxBuckets, [this] { return clock.now_us; }};
  RateDecision decide(const std::vector<LimitDescriptor>& limits, double cost = 1) {
    return store.decide(limits, cost);
  }
};


TEST_CASE("token bucket: a new bucket starts full and allows a burst of capacity",
          "[ratelimit][token_bucket]") {
  Fixture f;
  const std::vector<LimitDescriptor> limits = {limit("a", 5, 1)};
  for (int i = 0; i < 5; ++i) {
    const RateDecision d = f.decide(limits);
    REQUIRE(d.allowed);
    REQUIRE(d.limits.size() == 1);
    CHECK(d.limits[0].sufficient);
    CHECK(d.limits[0].remaining == 4 - i);
  }
  const RateDecision denied = f.decide(limits);
  CHECK_FALSE(denied.allowed);
  CHECK_FALSE(denied.limits[0].sufficient);
  CHECK(denied.limits[0].remaining == 0);
  CHECK(denied.limits[0].seconds_to_cost == 1);
  CHECK(denied.limits[0].seconds_to_full == 5);
}

TEST_CASE("token bucket: refill from elapsed time", "[ratelimit][token_bucket]") {
  Fixture f;
  const std::vector<LimitDescriptor> limits = {limit("a", 10, 10)};
  for (int i = 0; i < 10; ++i) REQUIRE(f.decide(limits).allowed);
  REQUIRE_FALSE(f.decide(limits).allowed);

  f.clock.advance_ms(50);  // half a token
  RateDecision d = f.decide(limits);
  CHECK_FALSE(d.allowed);
  CHECK(d.limits[0].remaining == Approx(0.5));
  CHECK(d.limits[0].seconds_to_cost == Approx(0.05));
  CHECK(d.limits[0].seconds_to_full == Approx(0.95));

  f.clock.advance_ms(50);  // one token
  d = f.decide(limits);
  CHECK(d.allowed);
  CHECK(d.limits[0].remaining == Approx(0).margin(1e-12));
  CHECK(d.limits[0].seconds_to_cost == Approx(0.1));

  f.clock.advance_ms(350);
  d = f.decide(limits);
  CHECK(d.allowed);
  CHECK(d.limits[0].remaining == Approx(2.5));
  CHECK(d.limits[0].seconds_to_cost == 0);
  CHECK(d.limits[0].seconds_to_full == Approx(0.75));
}

TEST_CASE("token bucket: refill is capped at capacity", "[ratelimit][token_bucket]") {
  Fixture f;
  const std::vector<LimitDescriptor> limits = {limit("a", 3, 1)};
  REQUIRE(f.decide(limits).allowed);
  f.clock.advance_ms(3'600'000);  // an hour
  RateDecision d = f.decide(limits);
  CHECK(d.limits[0].remaining == 2);  // capped at 3, minus 1
  for (int i = 0; i < 2; ++i) REQUIRE(f.decide(limits).allowed);
  CHECK_FALSE(f.decide(limits).allowed);
}

TEST_CASE("token bucket: fractional rate 0.5/s", "[ratelimit][token_bucket]") {
  Fixture f;
  const std::vector<LimitDescriptor> limits = {limit("a", 1, 0.5)};
  REQUIRE(f.decide(limits).allowed);
  RateDecision d = f.decide(limits);
  REQUIRE_FALSE(d.allowed);
  CHECK(d.limits[0].seconds_to_cost == 2);
  CHECK(d.limits[0].seconds_to_full == 2);

  f.clock.advance_ms(1999);
  d = f.decide(limits);
  CHECK_FALSE(d.allowed);
  CHECK(d.limits[0].remaining == Approx(0.9995));
  CHECK(d.limits[0].seconds_to_cost == Approx(0.001));

  f.clock.advance_ms(1);
  CHECK(f.decide(limits).allowed);
}

TEST_CASE("token bucket: cost greater than one", "[ratelimit][token_bucket]") {
  Fixture f;
  const std::vector<LimitDescriptor> limits = {limit("a", 10, 2)};
  RateDecision d = f.decide(limits, 4);
  CHECK(d.allowed);
  CHECK(d.limits[0].remaining == 6);
  CHECK(d.limits[0].seconds_to_cost == 0);
  CHECK(d.limits[0].seconds_to_full == 2);
  REQUIRE(f.decide(limits, 4).allowed);  // 2 left
  d = f.decide(limits, 4);
  CHECK_FALSE(d.allowed);
  CHECK(d.limits[0].remaining == 2);
  CHECK(d.limits[0].seconds_to_cost == 1);  // 2 more tokens at 2/s
  CHECK(d.limits[0].seconds_to_full == 4);

  SECTION("a cheaper request still passes") {
    d = f.decide(limits, 2);
    CHECK(d.allowed);
    CHECK(d.limits[0].remaining == 0);
  }
  SECTION("a cost above capacity can never pass") {
    d = f.decide(limits, 11);
    CHECK_FALSE(d.allowed);
    CHECK(d.limits[0].seconds_to_cost == std::numeric_limits<double>::infinity());
  }
}

TEST_CASE("token bucket: all or nothing over several buckets", "[ratelimit][token_bucket]") {
  Fixture f;
  const LimitDescriptor small = limit("small", 2, 1);
  const LimitDescriptor big = limit("big", 100, 1);
  const std::vector<LimitDescriptor> both = {big, small};
  REQUIRE(f.decide(both).allowed);
  REQUIRE(f.decide(both).allowed);

  // small is empty: the request is denied and big is not debited.
  RateDecision d = f.decide(both);
  CHECK_FALSE(d.allowed);
  CHECK(d.limits[0].sufficient);
  CHECK(d.limits[0].remaining == 98);
  CHECK(d.limits[0].seconds_to_cost == 0);
  CHECK_FALSE(d.limits[1].sufficient);
  CHECK(d.limits[1].remaining == 0);
  CHECK(f.store.state(big).tokens == 98);
  CHECK(f.store.state(small).tokens == 0);

  // big alone still has its tokens.
  d = f.decide({big});
  CHECK(d.allowed);
  CHECK(d.limits[0].remaining == 97);

  // The pure function leaves the states untouched on a denial.
  std::vector<BucketState> states = {{5, 0, true}, {0.5, 0, true}};
  const std::vector<LimitDescriptor> limits = {limit("x", 5, 1), limit("y", 5, 1)};
  d = sluice::decide_limits(states, limits, 1, 0);
  CHECK_FALSE(d.allowed);
  CHECK(states[0].tokens == 5);
  CHECK(states[1].tokens == 0.5);
  d = sluice::decide_limits(states, limits, 0.5, 0);
  CHECK(d.allowed);
  CHECK(states[0].tokens == 4.5);
  CHECK(states[1].tokens == 0);
}

TEST_CASE("token bucket: a clock going backwards gives no refill", "[ratelimit][token_bucket]") {
  const std::vector<LimitDescriptor> limits = {limit("a", 10, 1)};
  std::vector<BucketState> states = {{4, 100 * kSecond, true}};

  RateDecision d = sluice::decide_limits(states, limits, 1, 90 * kSecond);
  CHECK(d.allowed);
  CHECK(d.limits[0].remaining == 3);
  // The later timestamp is kept, so the 10 s are not refilled twice.
  CHECK(states[0].timestamp_us == 100 * kSecond);

  d = sluice::decide_limits(states, limits, 1, 101 * kSecond);
  CHECK(d.limits[0].remaining == 3);  // 3 + 1 refilled - 1
  CHECK(states[0].timestamp_us == 101 * kSecond);
}

TEST_CASE("token bucket: seconds_to_full and seconds_to_cost", "[ratelimit][token_bucket]") {
  const std::vector<LimitDescriptor> limits = {limit("a", 50, 10)};
  std::vector<BucketState> states = {BucketState{}};
  RateDecision d = sluice::decide_limits(states, limits, 1, 0);
  CHECK(d.limits[0].remaining == 49);
  CHECK(d.limits[0].seconds_to_cost == 0);
  CHECK(d.limits[0].seconds_to_full == Approx(0.1));

  states[0] = {0.25, 0, true};
  d = sluice::decide_limits(states, limits, 2, 0);
  CHECK_FALSE(d.allowed);
  CHECK(d.limits[0].seconds_to_cost == Approx(0.175));
  CHECK(d.limits[0].seconds_to_full == Approx(4.975));

  states[0] = {50, 0, true};
  d = sluice::decide_limits(states, limits, 0, 5 * kSecond);
  CHECK(d.allowed);
  CHECK(d.limits[0].seconds_to_full == 0);  // full, cost 0
}

TEST_CASE("token bucket: Redis keys expire after a full refill and a margin",
          "[ratelimit][token_bucket]") {
  CHECK(sluice::bucket_ttl_ms(50, 10) == 6000);
  CHECK(sluice::bucket_ttl_ms(1, 0.3) == 4334);  // ceil(3333.33) + 1000
  CHECK(sluice::bucket_ttl_ms(5, 0) == sluice::kMaxBucketTtlMs);
}

}  // namespace token_bucket_test
