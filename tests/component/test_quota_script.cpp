// Component test: quotas in the rate-limit script on a real redis-server:
// one quota alone and in a batch, the period by Redis' clock whatever the
// gateway's, and the refund script. The run of quotas mixed with other limits
// against the C++ twin is a row of test_twin_vs_script.cpp.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "support/script_limits.hpp"
#include "support/script_redis.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

namespace quota_script_test {

using sluice::QuotaPeriods;

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
