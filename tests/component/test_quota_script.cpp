// Component test: quotas in the rate-limit script on a real redis-server
// against the C++ twin, mixed with token buckets and sliding windows, across
// many short periods, with the gateway's periods starting a period behind
// Redis' clock (as they do in the second after a period starts). Every request also carries a roomy
// token bucket, the clock: when the request is admitted its stored timestamp is the script's TIME,
// so the twin is decided at that very moment and checked bit for bit.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "support/script_redis.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

namespace quota_script_test {

using sluice::QuotaPeriods;

LimitDescriptor quota(std::string limit, double capacity) {
  LimitDescriptor d = bucket(std::move(limit), "q", capacity, 0);
  d.algorithm = sluice::LimitAlgorithm::kQuota;
  return d;
}

// Periods of `len_us` aligned to multiples of it, around `t_us` shifted by
// `shift` periods (the gateway's clock ahead of or behind Redis').
QuotaPeriods periods_around(std::int64_t t_us, double len_us, int shift) {
  const double start = std::floor(static_cast<double>(t_us) / len_us) * len_us + shift * len_us;
  return QuotaPeriods{start, start + len_us, start + 2 * len_us};
}

// A stored quota: its period's end and the units used in it.
BucketState stored_quota(Redis& redis, const std::string& key) {
  Reply r = redis.command({"GET", key});
  if (r->type != REDIS_REPLY_STRING) return {};
  REQUIRE(r->len == 16);
  double d[2];
  std::memcpy(d, r->str, sizeof d);
  return BucketState{d[1], static_cast<std::int64_t>(d[0]), true};
}

TEST_CASE("script: quotas decide exactly like the C++ twin, mixed with other limits",
          "[ratelimit][script][redis][quota]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;

  // Periods of 40 and 100 ms, so that a few hundred calls cross many.
  const double lengths[] = {40'000, 100'000};
  std::vector<LimitDescriptor> pool = {quota("q1", 5), quota("q2", 2.5), bucket("t", "t", 3, 20)};
  pool.back().max_wait_seconds = 0.01;
  const LimitDescriptor clock = bucket("clock", "clock", 1e12, 1);
  const double costs[] = {1, 0.5, 2};
  const int shifts[] = {0, 0, 0, -1, -1};
  std::map<std::string, BucketState> twin;
  Lcg rng;
  int allowed = 0;
  int denied = 0;
  int skewed = 0;
  int refusals = 0;
  for (int step = 0; step < 600; ++step) {
    CAPTURE(step);
    std::vector<LimitDescriptor> limits;
    const std::uint32_t mask = 1 + rng.next(7);
    const std::int64_t gateway_now = redis.time_us();
    for (std::uint32_t k = 0; k < 3; ++k) {
      if (!(mask & (1u << k))) continue;
      LimitDescriptor l = pool[k];
      if (l.algorithm == sluice::LimitAlgorithm::kQuota) {
        const int shift = shifts[rng.next(5)];
        skewed += shift != 0;
        l.periods = periods_around(gateway_now, lengths[k], shift);
      }
      l.shadow = rng.next(6) == 0;
      limits.push_back(l);
    }
    limits.push_back(clock);
    const double cost = costs[rng.next(3)];
    std::vector<BucketState> states;
    for (const auto& l : limits) states.push_back(twin[key_of(l)]);

    const std::int64_t t0 = redis.time_us();
    std::string refused;
    const RateDecision decided = redis.decide(limits, cost, &refused);
    const std::int64_t t1 = redis.time_us();
    if (!refused.empty()) {
      // A slow step: Redis' time left the two periods sent before the call ran.
      CHECK_THAT(refused, Catch::Matchers::Contains("no quota period holds Redis time"));
      bool left = false;
      for (const auto& l : limits) {
        left = left || (l.algorithm == sluice::LimitAlgorithm::kQuota &&
                        static_cast<double>(t1) >= l.periods.next_end_us);
      }
      CHECK(left);
      ++refusals;
      continue;
    }
    if (decided.allowed) {
      ++allowed;
      const std::int64_t now = redis.stored(key_of(clock)).timestamp_us;
      REQUIRE(now >= t0);
      REQUIRE(now <= t1);
      check_equal(decided, sluice::decide_limits(states, limits, cost, now));
      for (std::size_t i = 0; i < limits.size(); ++i) {
        twin[key_of(limits[i])] = states[i];
        if (limits[i].algorithm != sluice::LimitAlgorithm::kQuota) continue;
        const BucketState stored = stored_quota(redis, key_of(limits[i]));
        if (!stored.exists) continue;  // its period ended a second ago (a slow step)
        CHECK(stored.tokens == states[i].tokens);
        CHECK(stored.timestamp_us == states[i].timestamp_us);
        if (!limits[i].shadow || decided.limits[i].sufficient) {
          // Written now: it expires a second after its period ends.
          const long long pttl = redis.pttl(key_of(limits[i]));
          CHECK(pttl > 0);
          CHECK(pttl <= sluice::quota_ttl_ms(static_cast<double>(stored.timestamp_us), t0));
        }
      }
    } else {
      ++denied;
      CHECK(decided.delay_seconds == 0);
      // Between the TIMEs before and after the call, unless a period ended
      // in between (then the twin's two ends are in different periods).
      bool one_period = true;
      for (const auto& l : limits) {
        if (l.algorithm == sluice::LimitAlgorithm::kQuota) {
          one_period = one_period && sluice::quota_period_end(l.periods, t0) ==
                                         sluice::quota_period_end(l.periods, t1);
        }
      }
      std::vector<BucketState> at_t0 = states;
      std::vector<BucketState> at_t1 = states;
      if (one_period) {
        check_denied_between(decided, sluice::decide_limits(at_t0, limits, cost, t0),
                             sluice::decide_limits(at_t1, limits, cost, t1));
      }
      for (std::size_t i = 0; i < limits.size(); ++i) {
        if (limits[i].algorithm != sluice::LimitAlgorithm::kQuota) continue;
        const BucketState stored = stored_quota(redis, key_of(limits[i]));
        if (stored.exists) CHECK(stored.tokens == states[i].tokens);  // a denial writes nothing
      }
    }
  }
  INFO("allowed " << allowed << ", denied " << denied << ", skewed " << skewed << ", refused "
                    << refusals);
  CHECK(allowed >= 40);
  CHECK(denied >= 40);
  CHECK(skewed >= 100);
}

TEST_CASE("script: one quota alone and in a batch: the period by Redis' clock, exactly capacity",
          "[ratelimit][script][redis][quota]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  const std::int64_t now = redis.time_us();
  const double hour = 3600e6;
  // The gateway's periods from the previous hour on, and from this one: Redis'
  // hour all the same, one key.
  LimitDescriptor behind = quota("hourly", 3);
  behind.periods = periods_around(now, hour, -1);
  LimitDescriptor exact = behind;
  exact.periods = periods_around(now, hour, 0);
  const double end = exact.periods.end_us;

  const RateDecision first = redis.decide({behind}, 1);
  REQUIRE(first.allowed);
  CHECK(first.limits[0].remaining == 2);
  const std::vector<sluice::BatchRequest> batch = {{&exact, 1}, {&behind, 1}, {&exact, 1}};
  const std::vector<RateDecision> decisions = redis.decide_batch(batch);
  REQUIRE(decisions.size() == 3);
  CHECK(decisions[0].allowed);
  CHECK(decisions[1].allowed);
  CHECK(decisions[1].limits[0].remaining == 0);
  CHECK_FALSE(decisions[2].allowed);
  const double to_end = (end - static_cast<double>(redis.time_us())) / 1e6;
  CHECK(decisions[2].limits[0].seconds_to_cost >= to_end);
  CHECK(decisions[2].limits[0].seconds_to_cost <= to_end + 1);
  CHECK(decisions[2].limits[0].seconds_to_full == decisions[2].limits[0].seconds_to_cost);
  const BucketState stored = stored_quota(redis, key_of(exact));
  CHECK(stored.tokens == 3);
  CHECK(static_cast<double>(stored.timestamp_us) == end);
  CHECK(redis.pttl(key_of(exact)) <= sluice::quota_ttl_ms(end, now));
  CHECK(redis.pttl(key_of(exact)) >= sluice::quota_ttl_ms(end, redis.time_us()) - 1);
}

TEST_CASE("script: a gateway whose clock is wrong cannot move a quota's period",
          "[ratelimit][script][redis][quota]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  const double minute = 60e6;
  LimitDescriptor right = quota("minutely", 2);
  right.periods = periods_around(redis.time_us(), minute, 0);
  REQUIRE(redis.decide({right}, 1).allowed);
  const BucketState before = stored_quota(redis, key_of(right));
  // Periods a minute, an hour, a day ahead, and a day behind: none holds
  // Redis' time. The call is refused, alone, with another limit, and in a
  // batch, and the period stored stays as it was.
  const LimitDescriptor other = bucket("other", "o", 5, 1);
  for (const double shift : {2.0, 60.0, 1440.0, -1440.0}) {
    CAPTURE(shift);
    LimitDescriptor wrong = right;
    wrong.periods = periods_around(redis.time_us(), minute, static_cast<int>(shift));
    CHECK_THAT(redis.decide_error({wrong}, 1),
               Catch::Matchers::Contains("no quota period holds Redis time"));
    CHECK_THAT(redis.decide_error({other, wrong}, 1),
               Catch::Matchers::Contains("no quota period holds Redis time"));
    const BucketState after = stored_quota(redis, key_of(right));
    CHECK(after.tokens == before.tokens);
    CHECK(after.timestamp_us == before.timestamp_us);
    // A debit settled with such periods leaves it alone too.
    CHECK(redis.refund({wrong}, -1) == 0);
  }
  CHECK(redis.pttl(key_of(other)) == -2);  // nothing written
  // A period two ahead stored by an older gateway is replaced by Redis' own.
  // (store() packs tokens, then the stamp: a quota's end, then its units.)
  redis.store(key_of(right), BucketState{right.periods.end_us + 2 * minute, 2, true});
  const RateDecision healed = redis.decide({right}, 1);
  CHECK(healed.allowed);
  CHECK(healed.limits[0].remaining == 1);
  CHECK(static_cast<double>(stored_quota(redis, key_of(right)).timestamp_us) ==
        sluice::quota_period_end(right.periods, redis.time_us()));
}

TEST_CASE("script: the refund script gives a quota's units back while its period lasts",
          "[ratelimit][script][redis][quota]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  LimitDescriptor q = quota("daily", 10);
  q.periods = periods_around(redis.time_us(), 86400e6, 0);
  CHECK(redis.refund({q}, 1) == 0);  // nothing used yet
  REQUIRE(redis.decide({q}, 4).allowed);
  CHECK(redis.refund({q}, 3) == 1);
  CHECK(stored_quota(redis, key_of(q)).tokens == 1);
  CHECK(redis.refund({q}, 5) == 1);
  CHECK(stored_quota(redis, key_of(q)).tokens == 0);  // never below 0
  // A period that has ended has nothing to give back.
  LimitDescriptor old = quota("old", 10);
  const std::int64_t now = redis.time_us();
  old.periods = QuotaPeriods{static_cast<double>(now) - 2e6, static_cast<double>(now) + 50'000,
                             static_cast<double>(now) + 100'000};
  REQUIRE(redis.decide({old}, 4).allowed);
  const double period_end = static_cast<double>(stored_quota(redis, key_of(old)).timestamp_us);
  for (int i = 0; i < 1'000'000 && static_cast<double>(redis.time_us()) < period_end; ++i) {
  }
  CHECK(redis.refund({old}, 3) == 0);
  CHECK(stored_quota(redis, key_of(old)).tokens == 4);
}

}  // namespace quota_script_test
