// Component test: sliding logs in the rate-limit script on a real
// redis-server against the C++ twin, mixed with token buckets and quotas,
// over many windows; a batch; the refund; the bucket read. Every request also
// carries a roomy token bucket, the clock: when the request is admitted its
// stored timestamp is the script's TIME, so the twin is decided at that very
// moment and checked bit for bit, and the log's entries with it.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "support/script_redis.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

namespace sliding_log_script_test {

LimitDescriptor log_limit(std::string limit, double capacity, double seconds) {
  LimitDescriptor d = bucket(std::move(limit), "l", capacity, 0);
  d.algorithm = sluice::LimitAlgorithm::kSlidingLog;
  d.window_seconds = seconds;
  return d;
}

// The log in Redis: its entries' scores, oldest first.
std::vector<double> stored_log(Redis& redis, const std::string& key) {
  Reply r = redis.command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
  REQUIRE(r->type == REDIS_REPLY_ARRAY);
  std::vector<double> scores;
  for (std::size_t i = 1; i < r->elements; i += 2) scores.push_back(std::stod(r->element[i]->str));
  return scores;
}

TEST_CASE("script: sliding logs decide exactly like the C++ twin, mixed with other limits",
          "[ratelimit][script][redis][sliding_log]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  // Windows of 20 and 50 ms, so that a few hundred calls cross many.
  const std::vector<LimitDescriptor> pool = {log_limit("l1", 5, 0.05),
                                             log_limit("l2", 3.5, 0.02), bucket("t", "t", 3, 20)};
  const LimitDescriptor clock = bucket("clock", "clock", 1e12, 1);
  const double costs[] = {1, 0.5, 2, 3};
  std::map<std::string, BucketState> twin;
  Lcg rng;
  int allowed = 0;
  int denied = 0;
  for (int step = 0; step < 600; ++step) {
    CAPTURE(step);
    std::vector<LimitDescriptor> limits;
    const std::uint32_t mask = 1 + rng.next(7);
    for (std::uint32_t k = 0; k < 3; ++k) {
      if (mask & (1u << k)) limits.push_back(pool[k]);
    }
    for (auto& l : limits) l.shadow = rng.next(6) == 0;
    limits.push_back(clock);
    const double cost = costs[rng.next(4)];
    std::vector<BucketState> states;
    for (const auto& l : limits) states.push_back(twin[key_of(l)]);

    const std::int64_t t0 = redis.time_us();
    const RateDecision decided = redis.decide(limits, cost);
    const std::int64_t t1 = redis.time_us();
    if (decided.allowed) {
      ++allowed;
      const std::int64_t now = redis.stored(key_of(clock)).timestamp_us;
      REQUIRE(now >= t0);
      REQUIRE(now <= t1);
      check_equal(decided, sluice::decide_limits(states, limits, cost, now));
    } else {
      ++denied;
      CHECK(decided.delay_seconds == 0);
      // The twin at the TIME before and after; a log is also slid when denied.
      std::vector<BucketState> at_t0 = states;
      check_denied_between(decided, sluice::decide_limits(at_t0, limits, cost, t0),
                           sluice::decide_limits(states, limits, cost, t1));
    }
    for (std::size_t i = 0; i < limits.size(); ++i) {
      if (limits[i].algorithm != sluice::LimitAlgorithm::kSlidingLog) continue;
      // The twin's entries are Redis' log: both slid to the TIME after the
      // call (Redis slid the log at its own TIME, even for a denial).
      std::vector<double> in_redis = stored_log(redis, key_of(limits[i]));
      BucketState mine = decided.allowed ? states[i] : twin[key_of(limits[i])];
      sluice::slide_log(mine, limits[i].window_seconds, t1);
      BucketState theirs;
      theirs.log = in_redis;
      sluice::slide_log(theirs, limits[i].window_seconds, t1);
      CHECK(theirs.log == mine.log);
      if (decided.allowed && !in_redis.empty()) {
        const long long pttl = redis.pttl(key_of(limits[i]));
        CHECK(pttl > 0);
        CHECK(pttl <= sluice::log_ttl_ms(limits[i].window_seconds));
      }
    }
    if (decided.allowed) {
      for (std::size_t i = 0; i < limits.size(); ++i) twin[key_of(limits[i])] = states[i];
    }
  }
  INFO("allowed " << allowed << ", denied " << denied);
  CHECK(allowed >= 40);
  CHECK(denied >= 40);
}

TEST_CASE("script: a batch of sliding logs decides in order; refunds and reads",
          "[ratelimit][script][redis][sliding_log]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  const LimitDescriptor l = log_limit("l", 3, 1000);
  const std::vector<sluice::BatchRequest> batch = {{&l, 2}, {&l, 2}, {&l, 1}, {&l, 1}};
  const std::vector<RateDecision> decisions = redis.decide_batch(batch);
  REQUIRE(decisions.size() == 4);
  CHECK(decisions[0].allowed);
  CHECK_FALSE(decisions[1].allowed);
  CHECK(decisions[2].allowed);
  CHECK(decisions[2].limits[0].remaining == 0);
  CHECK_FALSE(decisions[3].allowed);
  // Three entries of one TIME, each its own member.
  const std::vector<double> entries = stored_log(redis, key_of(l));
  REQUIRE(entries.size() == 3);
  CHECK(entries[0] == entries[2]);
  CHECK(decisions[3].limits[0].seconds_to_cost <= 1000);
  CHECK(decisions[3].limits[0].seconds_to_cost > 999);

  // The refund takes the newest units back; a key that is no log gives nothing.
  CHECK(redis.refund({l}, 2) == 1);
  CHECK(stored_log(redis, key_of(l)).size() == 1);
  const LimitDescriptor none = log_limit("none", 3, 1000);
  CHECK(redis.refund({none}, 1) == 0);

  // A value of another algorithm under a log's key is dropped, not an error.
  const LimitDescriptor other = bucket("l", "l", 3, 1);
  REQUIRE(key_of(other) == key_of(l));
  REQUIRE(redis.decide({other}, 1).allowed);
  const RateDecision after = redis.decide({l}, 1);
  CHECK(after.allowed);
  CHECK(after.limits[0].remaining == 2);
}

}  // namespace sliding_log_script_test
