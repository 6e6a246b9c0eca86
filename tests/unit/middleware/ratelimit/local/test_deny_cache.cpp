// The denial cache with a manual clock: what it denies, for how long, the
// cost rule, the 1 s cap, forgetting and the size bound.
#include <catch2/catch.hpp>

#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/deny_cache.hpp"

using namespace sluice;

namespace deny_cache_test {

LimitDescriptor bucket(const char* limit, const char* key, double capacity, double rate) {
  return LimitDescriptor{limit, key_hash(key), capacity, rate};
}

// What the store answers for a bucket holding `tokens` asked for `cost`.
LimitState short_of(const LimitDescriptor& b, double tokens, double cost) {
  return local_state(b, tokens, cost, false);
}

// Records a denial of one bucket.
void remember(DenyCache& cache, const LimitDescriptor& b, double cost, const LimitState& s,
              std::int64_t asked_us) {
  RateDecision d;
  d.limits = {s};
  cache.remember(std::span(&b, 1), cost, d, asked_us);
}

TEST_CASE("deny cache: denies until the bucket can hold the cost again", "[ratelimit][local]") {
  DenyCache cache;
  const auto b = bucket("per_key", "alice", 10, 2);  // 2 tokens/s
  // Asked at t=1 s: 0.5 tokens, cost 1 → 0.25 s to go.
  remember(cache, b, 1, short_of(b, 0.5, 1), 1'000'000);
  REQUIRE(cache.size() == 1);
  auto s = cache.denied(b, 1, 1'100'000);
  REQUIRE(s);
  CHECK_FALSE(s->sufficient);
  CHECK(s->remaining == Approx(0.7));         // refilled for 0.1 s
  CHECK(s->seconds_to_cost == Approx(0.15));  // until 1.25 s
  CHECK(s->seconds_to_full == Approx(4.65));
  CHECK(cache.denied(b, 1, 1'249'999));
  CHECK_FALSE(cache.denied(b, 1, 1'250'000));  // the store may allow it now
  CHECK(cache.size() == 0);                    // an expired entry leaves on lookup
}

TEST_CASE("deny cache: the same or a higher cost only, and the same parameters",
          "[ratelimit][local]") {
  DenyCache cache;
  const auto b = bucket("per_key", "alice", 10, 1);
  remember(cache, b, 2, short_of(b, 1.5, 2), 0);
  CHECK(cache.denied(b, 2, 100));
  CHECK(cache.denied(b, 3, 100));
  CHECK_FALSE(cache.denied(b, 1, 100));  // 1.5 tokens are enough for 1
  auto other_plan = b;
  other_plan.capacity = 100;
  CHECK_FALSE(cache.denied(other_plan, 2, 100));
  // Another limit keyed by the same value is another bucket.
  CHECK_FALSE(cache.denied(bucket("per_key_burst", "alice", 10, 1), 2, 100));
  CHECK_FALSE(cache.denied(bucket("per_key", "bob", 10, 1), 2, 100));
}

TEST_CASE("deny cache: the other buckets of a denial are known, not denied", "[ratelimit][local]") {
  DenyCache cache;
  const auto small = bucket("small", "k", 2, 1);
  const auto big = bucket("big", "k", 10, 1);
  RateDecision d;
  d.limits = {short_of(small, 0.5, 1), local_state(big, 8, 1, true)};
  const LimitDescriptor both[] = {small, big};
  cache.remember(both, 1, d, 0);
  CHECK(cache.denied(small, 1, 100'000));
  CHECK_FALSE(cache.denied(big, 1, 100'000));
  auto known = cache.known(big, 1, 100'000);
  REQUIRE(known);
  CHECK(known->sufficient);
  CHECK(known->remaining == Approx(8.1));
  // Known for as long as the denial lasts (0.5 s).
  CHECK(cache.known(big, 1, 499'999));
  CHECK_FALSE(cache.known(big, 1, 500'000));
}

TEST_CASE("deny cache: entries live at most one second", "[ratelimit][local]") {
  DenyCache cache;
  const auto slow = bucket("slow", "k", 10, 0.01);  // 100 s to the next token
  remember(cache, slow, 1, short_of(slow, 0, 1), 5'000'000);
  CHECK(cache.denied(slow, 1, 5'999'999));
  CHECK_FALSE(cache.denied(slow, 1, 6'000'000));
}

TEST_CASE("deny cache: a sufficient answer is not remembered; forget and clear",
          "[ratelimit][local]") {
  DenyCache cache;
  const auto a = bucket("a", "k", 10, 1);
  const auto b = bucket("b", "k", 10, 1);
  remember(cache, a, 1, local_state(a, 5, 1, true), 0);
  CHECK(cache.size() == 0);
  remember(cache, a, 1, short_of(a, 0, 1), 0);
  remember(cache, b, 1, short_of(b, 0, 1), 0);
  cache.forget(a);
  CHECK_FALSE(cache.denied(a, 1, 10));
  CHECK(cache.denied(b, 1, 10));
  cache.clear();
  CHECK_FALSE(cache.denied(b, 1, 10));
}

TEST_CASE("deny cache: bounded; a full cache drops expired entries first", "[ratelimit][local]") {
  DenyCache cache(2);
  const auto a = bucket("a", "1", 10, 1);
  const auto b = bucket("a", "2", 10, 1);
  const auto c = bucket("a", "3", 10, 1);
  remember(cache, a, 1, short_of(a, 0.9, 1), 0);  // expires at 0.1 s
  remember(cache, b, 1, short_of(b, 0, 1), 0);    // at 1 s
  remember(cache, c, 1, short_of(c, 0, 1), 50'000);
  CHECK(cache.size() == 2);
  CHECK_FALSE(cache.denied(c, 1, 60'000));            // full: not remembered
  remember(cache, c, 1, short_of(c, 0, 1), 200'000);  // a's entry has expired: room
  CHECK(cache.size() == 2);
  CHECK(cache.denied(c, 1, 210'000));
  CHECK(cache.denied(b, 1, 210'000));
}

TEST_CASE("deny cache: an entry that outlived its shortage asks the store", "[ratelimit][local]") {
  // A wait reported longer than the bucket's refill needs (a reservation's
  // wait kept after its refund, say): once the refilled tokens hold the
  // cost, the cache no longer answers.
  DenyCache cache;
  const auto b = bucket("per_key", "alice", 10, 2);
  LimitState s = short_of(b, 0.5, 1);
  s.seconds_to_cost = 2;
  remember(cache, b, 1, s, 1'000'000);
  CHECK(cache.denied(b, 1, 1'100'000));        // 0.7 tokens: still short
  CHECK_FALSE(cache.denied(b, 1, 1'500'000));  // 1.5 tokens: the store decides
}

TEST_CASE("deny cache: purge_expired drops what ran out, and says how many", "[ratelimit][local]") {
  DenyCache cache;
  for (int i = 0; i < 1000; ++i) {
    const auto b = bucket("a", std::to_string(i).c_str(), 10, 1);
    remember(cache, b, 1, short_of(b, 0, 1), 0);  // each until 1 s (the cap)
  }
  const auto late = bucket("a", "late", 10, 1);
  remember(cache, late, 1, short_of(late, 0, 1), 500'000);  // until 1.5 s
  REQUIRE(cache.size() == 1001);
  CHECK(cache.purge_expired(999'999) == 0);
  CHECK(cache.purge_expired(1'000'000) == 1000);
  CHECK(cache.size() == 1);
  CHECK(cache.denied(late, 1, 1'000'000));
  CHECK(cache.purge_expired(1'500'000) == 1);
  CHECK(cache.size() == 0);
}

}  // namespace deny_cache_test
