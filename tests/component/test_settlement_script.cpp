// Component test: the refund script as settlements use it on a real
// redis-server: positive units give back, negative units take more, down to
// max_debt below empty at most, for token buckets, sliding windows, quotas
// and sliding logs; a limit that is gone takes a debit from full.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "middleware/ratelimit/algorithms/concurrency.hpp"
#include "middleware/ratelimit/algorithms/token_bucket.hpp"
#include "support/script_redis.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

namespace settlement_script_test {

// One refund call of these refunds (negative units: a debit), in order.
long long settle_all(Redis& redis, const std::vector<sluice::BucketRefund>& refunds) {
  std::vector<std::string> keys;
  for (const auto& refund : refunds) keys.push_back(key_of(refund.bucket));
  std::vector<std::string> args = {"EVAL", std::string(sluice::kRefundLimitsScript),
                                   std::to_string(keys.size())};
  args.insert(args.end(), keys.begin(), keys.end());
  const auto argv = kCodec.encode_refund_args(refunds);
  args.insert(args.end(), argv.begin(), argv.end());
  Reply r = redis.command(args);
  INFO((r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string()));
  REQUIRE(r->type == REDIS_REPLY_INTEGER);
  return r->integer;
}

// One refund call of `units` (negative: a debit) with `max_debt`.
long long settle(Redis& redis, const LimitDescriptor& limit, double units, double max_debt) {
  return settle_all(redis, {{limit, units, max_debt}});
}

// The two doubles of a 16-byte value (a token bucket, a quota).
std::pair<double, double> pair_of(Redis& redis, const std::string& key) {
  Reply r = redis.command({"GET", key});
  REQUIRE(r->type == REDIS_REPLY_STRING);
  REQUIRE(r->len == 16);
  double d[2];
  std::memcpy(d, r->str, sizeof d);
  return {d[0], d[1]};
}

TEST_CASE("script: a token bucket settles up and down, down to max_debt at most",
          "[ratelimit][script][redis][settlement]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  const LimitDescriptor b = bucket("tokens", "k", 10, 1e-9);  // nothing refills meanwhile
  REQUIRE(redis.decide({b}, 5).allowed);
  CHECK(settle(redis, b, 3, 0) == 1);  // cost 2, not 5
  CHECK(pair_of(redis, key_of(b)).first == Approx(8).margin(1e-6));
  CHECK(settle(redis, b, -20, 7) == 1);  // cost 20 more: down to -7 only
  CHECK(pair_of(redis, key_of(b)).first == Approx(-7).margin(1e-6));
  CHECK(settle(redis, b, -1, 7) == 1);  // already at the floor: stays
  CHECK(pair_of(redis, key_of(b)).first == Approx(-7).margin(1e-6));
  CHECK_FALSE(redis.decide({b}, 1).allowed);  // the debt is paid off first
  // The key lives until the bucket would be full again.
  CHECK(redis.pttl(key_of(b)) > 1'000'000'000LL);
  // A bucket that is gone takes a debit from full; a refund leaves it gone.
  const LimitDescriptor gone = bucket("tokens", "gone", 10, 1);
  CHECK(settle(redis, gone, 4, 0) == 0);
  CHECK(settle(redis, gone, -4, 0) == 1);
  CHECK(pair_of(redis, key_of(gone)).first == Approx(6).margin(1e-3));
}

TEST_CASE("script: windows, quotas and logs settle up and down",
          "[ratelimit][script][redis][settlement]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  LimitDescriptor w = bucket("window", "k", 10, 0);
  w.algorithm = sluice::LimitAlgorithm::kSlidingWindow;
  w.window_seconds = 1000;
  REQUIRE(redis.decide({w}, 5).allowed);
  CHECK(settle(redis, w, 2, 0) == 1);
  CHECK(stored_window(redis, key_of(w)).tokens == 3);
  CHECK(settle(redis, w, -20, 4) == 1);  // up to capacity + max_debt
  CHECK(stored_window(redis, key_of(w)).tokens == 14);

  LimitDescriptor q = bucket("quota", "k", 100, 0);
  q.algorithm = sluice::LimitAlgorithm::kQuota;
  const double now = static_cast<double>(redis.time_us());
  q.periods = {now - 1e9, now + 1e9, now + 2e9};
  CHECK(settle(redis, q, -30, 0) == 1);  // no count yet: the period's starts at 30
  CHECK(pair_of(redis, key_of(q)) == std::pair{now + 1e9, 30.0});
  REQUIRE(redis.decide({q}, 50).allowed);
  CHECK(settle(redis, q, 45, 0) == 1);  // the 50 cost 5
  CHECK(pair_of(redis, key_of(q)).second == 35);
  CHECK(settle(redis, q, -500, 20) == 1);
  CHECK(pair_of(redis, key_of(q)).second == 120);

  // A log settles each request on its own units: three requests, each
  // settled once.
  LimitDescriptor log = bucket("log", "k", 10, 0);
  log.algorithm = sluice::LimitAlgorithm::kSlidingLog;
  log.window_seconds = 1000;
  std::vector<LimitDescriptor> l(3, log);
  for (auto& request : l) request.slot = sluice::next_slot_number();
  const auto entries = [&] { return redis.command({"ZCARD", key_of(log)})->integer; };
  REQUIRE(redis.decide({l[0]}, 4).allowed);
  REQUIRE(redis.decide({l[1]}, 3).allowed);
  CHECK(settle(redis, l[1], 2, 0) == 1);  // cost 1, not 3
  CHECK(entries() == 5);
  CHECK(settle(redis, l[0], -3, 0) == 1);  // cost 7, not 4
  CHECK(entries() == 8);
  REQUIRE(redis.decide({l[2]}, 1).allowed);
  CHECK(settle(redis, l[2], -30, 2) == 1);  // up to capacity + max_debt entries
  CHECK(entries() == 12);
}

TEST_CASE("script: a limit settled several times in one call sees each settlement; a refund "
          "keeps the key's expiry, a debit sets it",
          "[ratelimit][script][redis][settlement]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  const LimitDescriptor b = bucket("tokens", "k", 10, 1e-9);
  REQUIRE(redis.decide({b}, 6).allowed);  // 4 left
  const LimitDescriptor other = bucket("tokens", "other", 10, 1e-9);
  REQUIRE(redis.decide({other}, 10).allowed);  // 0 left
  CHECK(settle_all(redis, {{b, 2, 0}, {other, 1, 0}, {b, 3, 0}, {b, -1, 0}}) == 4);
  CHECK(pair_of(redis, key_of(b)).first == Approx(8).margin(1e-6));
  CHECK(pair_of(redis, key_of(other)).first == Approx(1).margin(1e-6));

  LimitDescriptor q = bucket("quota", "k", 100, 0);
  q.algorithm = sluice::LimitAlgorithm::kQuota;
  const double now = static_cast<double>(redis.time_us());
  q.periods = {now - 1e9, now + 1e9, now + 2e9};
  REQUIRE(redis.decide({q}, 50).allowed);
  CHECK(settle_all(redis, {{q, 10, 0}, {q, 15, 0}}) == 2);
  CHECK(pair_of(redis, key_of(q)).second == 25);

  // The refund leaves the bucket fuller than the decision that set its
  // expiry did: the expiry stays. A debit sets it anew.
  REQUIRE(redis.command({"PEXPIRE", key_of(b), "5000"})->integer == 1);
  CHECK(settle(redis, b, 1, 0) == 1);
  CHECK(redis.pttl(key_of(b)) <= 5000);
  CHECK(redis.pttl(key_of(b)) > 0);
  CHECK(settle(redis, b, -1, 0) == 1);
  CHECK(redis.pttl(key_of(b)) > 1'000'000'000LL);
}

TEST_CASE("script: a debit on a bucket that refills very slowly keeps an expiry Redis takes",
          "[ratelimit][script][redis][settlement]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  // 0.001 per second: refilling 10^11 tokens and a debt of 10^9 takes 3 million
  // years, more milliseconds than a PX Redis takes (10^17 reaches it as
  // "1e+17"). The expiry is capped as the decide script's is.
  const LimitDescriptor b = bucket("slow", "k", 1e11, 0.001);
  REQUIRE(redis.decide({b}, 1e11).allowed);
  CHECK(settle(redis, b, -1e9, 1e9) == 1);
  CHECK(pair_of(redis, key_of(b)).first == Approx(-1e9));
  CHECK(redis.pttl(key_of(b)) <= sluice::kMaxBucketTtlMs);
  CHECK(redis.pttl(key_of(b)) > sluice::kMaxBucketTtlMs - 10'000);
}

}  // namespace settlement_script_test
