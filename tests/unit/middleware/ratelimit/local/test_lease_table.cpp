// Leases with a manual clock: sizing from the local rate (a cold bucket never
// leases), spending, putting back, expiry and refunds, the lifetime rule.
#include <catch2/catch.hpp>

#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/lease_table.hpp"

using namespace sluice;

namespace {

LimitDescriptor leased(const char* key, double capacity, double rate, double lease_tokens) {
  LimitDescriptor d{"global", key_hash(key), capacity, rate};
  d.lease_tokens = lease_tokens;
  return d;
}

// `count` requests of `cost`, evenly spread over [from, from + span).
void requests(LeaseTable& t, const LimitDescriptor& b, int count, std::int64_t from,
              std::int64_t span, double cost = 1) {
  for (int i = 0; i < count; ++i) t.try_spend(b, cost, from + span * i / count);
}

// What ask() would answer, without leaving the ask out.
double peek(LeaseTable& t, const LimitDescriptor& b) {
  const double wanted = t.ask(b, 1);
  t.answered(b);
  return wanted;
}

}  // namespace

TEST_CASE("lease size: cold buckets never lease; a lease is what 200 ms use, capped",
          "[ratelimit][local]") {
  CHECK(lease_size(0, 50, 1) == 0);
  CHECK(lease_size(4.9, 50, 1) == 0);  // below the minimum rate
  CHECK(lease_size(5, 50, 1) == 1);
  CHECK(lease_size(100, 50, 1) == 20);
  CHECK(lease_size(1000, 50, 1) == 50);
  CHECK(lease_size(1000, 50, 2) == 50);
  CHECK(lease_size(100, 50, 2) == 40);
  CHECK(lease_size(1000, 1, 2) == 0);  // lease_tokens below one request's cost
  CHECK(lease_size(6, 50, 0.5) == 0);  // 0.6 tokens: less than... one whole token
}

TEST_CASE("lease lifetime: 0.9 s while the bucket is at least half full, shorter below",
          "[ratelimit][local]") {
  CHECK(lease_lifetime_us(500, 1000) == 900'000);
  CHECK(lease_lifetime_us(250, 1000) == 450'000);
  CHECK(lease_lifetime_us(10, 1000) == 100'000);  // floor
  CHECK(lease_lifetime_us(0, 1000) == 100'000);
}

TEST_CASE("leases: the rate is measured per bucket, then a lease is spent locally",
          "[ratelimit][local]") {
  LeaseTable t;
  const auto b = leased("all", 1000, 100, 50);
  CHECK(peek(t, b) == 0);  // never seen
  requests(t, b, 3, 0, 100'000);
  t.try_spend(b, 1, 100'000);  // closes the first window: 3 in 0.1 s = 30/s
  CHECK(peek(t, b) == 6);
  requests(t, b, 100, 100'001, 100'000);
  t.try_spend(b, 1, 200'001);  // ~1000/s
  CHECK(peek(t, b) == 50);
  CHECK_FALSE(t.try_spend(b, 1, 200'002));  // no lease yet
  // A key that turns hot is measured within milliseconds: 40 requests in 5 ms.
  const auto burst = leased("burst", 1000, 100, 50);
  requests(t, burst, 40, 0, 5'000);
  CHECK(peek(t, burst) == 0);
  t.try_spend(burst, 1, 5'000);
  CHECK(peek(t, burst) == 50);
  // A few requests close together are no reason to lease.
  const auto few = leased("few", 1000, 100, 50);
  requests(t, few, 10, 0, 1'000);
  t.try_spend(few, 1, 6'000);
  CHECK(peek(t, few) == 0);

  LimitState after;
  after.remaining = 900;
  t.on_grant(b, 3, after, 300'000);
  CHECK(t.held_tokens() == 3);
  CHECK(t.next_expiry() == 1'200'000);
  CHECK(t.try_spend(b, 1, 300'001));
  CHECK(t.try_spend(b, 1, 300'002));
  const LimitState s = t.state(b, 1, 300'002);
  CHECK(s.sufficient);
  CHECK(s.remaining == Approx(900 + 0.000002 * 100 + 1));  // the store's, refilled, + the lease
  t.put_back(b, 1);
  CHECK(t.held_tokens() == 2);
  CHECK(t.try_spend(b, 2, 300'003));
  CHECK_FALSE(t.try_spend(b, 1, 300'004));  // spent
  CHECK(t.held_tokens() == 0);
}

TEST_CASE("leases: an expired lease is not spent and its rest is refunded", "[ratelimit][local]") {
  LeaseTable t;
  const auto b = leased("all", 1000, 100, 50);
  t.try_spend(b, 1, 0);
  LimitState after;
  after.remaining = 100;  // a fifth full: the lease lives a fifth of 0.9 s
  t.on_grant(b, 10, after, 0);
  CHECK(t.next_expiry() == 180'000);
  CHECK(t.try_spend(b, 1, 179'999));
  CHECK_FALSE(t.try_spend(b, 1, 180'000));
  CHECK(t.take_expired(150'000).empty());
  const auto refunds = t.take_expired(180'000);
  REQUIRE(refunds.size() == 1);
  CHECK(refunds[0].tokens == 9);
  CHECK(refunds[0].bucket.limit == "global");
  CHECK(refunds[0].bucket.key_hash == b.key_hash);
  CHECK(t.held_tokens() == 0);
  CHECK_FALSE(t.next_expiry());
  // An idle, empty bucket leaves the table.
  CHECK(t.size() == 1);
  CHECK(t.take_expired(180'000 + LeaseTable::kIdleUs).empty());
  CHECK(t.size() == 0);
}

TEST_CASE("leases: an unspent rest joins the next lease; take_all empties the table",
          "[ratelimit][local]") {
  LeaseTable t;
  const auto a = leased("a", 1000, 100, 50);
  const auto b = leased("b", 1000, 100, 50);
  t.try_spend(a, 1, 0);
  t.try_spend(b, 1, 0);
  LimitState full;
  full.remaining = 1000;
  t.on_grant(a, 0.5, full, 0);
  t.on_grant(a, 4, full, 10);
  CHECK(t.held_tokens() == 4.5);
  t.on_grant(b, 2, full, 10);
  const auto refunds = t.take_all();
  CHECK(refunds.size() == 2);
  double total = 0;
  for (const auto& r : refunds) total += r.tokens;
  CHECK(total == 6.5);
  CHECK(t.size() == 0);
}

TEST_CASE("leases: the table is bounded", "[ratelimit][local]") {
  LeaseTable t(2);
  const auto a = leased("a", 10, 1, 5);
  const auto b = leased("b", 10, 1, 5);
  const auto c = leased("c", 10, 1, 5);
  t.try_spend(a, 1, 0);
  t.try_spend(b, 1, 0);
  t.try_spend(c, 1, 0);
  CHECK(t.size() == 2);
  // Once a and b are idle, c finds room.
  t.try_spend(c, 1, LeaseTable::kIdleUs + 1);
  CHECK(t.size() == 1);
}

TEST_CASE("leases: one ask per bucket at a time; a low lease is topped up to its size",
          "[ratelimit][local]") {
  LeaseTable t;
  const auto b = leased("all", 1000, 100, 50);
  requests(t, b, 200, 0, 200'000);  // 1000/s: a lease of 50
  CHECK(t.ask(b, 1) == 50);
  CHECK(t.ask(b, 1) == 0);  // a burst on one worker asks once
  t.answered(b);            // denied or failed: the next request may ask
  CHECK(t.ask(b, 1) == 50);
  LimitState after;
  after.remaining = 900;
  CHECK(t.on_grant(b, 50, after, 200'000));
  CHECK(t.held_tokens() == 50);
  CHECK(t.ask(b, 1) == 0);  // holds its lease size
  // Spent down to 13 (more than a quarter of 50): no top-up yet; at 12, one.
  for (int i = 0; i < 37; ++i) REQUIRE(t.try_spend(b, 1, 200'001));
  CHECK(t.top_up(b, 1) == 0);
  REQUIRE(t.try_spend(b, 1, 200'002));
  CHECK(t.top_up(b, 1) == 38);  // back to 50 with what is held
  CHECK(t.top_up(b, 1) == 0);   // already out
  CHECK(t.on_grant(b, 38, after, 200'003));
  CHECK(t.held_tokens() == 50);
}
