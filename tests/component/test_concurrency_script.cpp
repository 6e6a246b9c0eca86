// Component test: concurrency slots in the rate-limit script on a real
// redis-server against the C++ twin, mixed with token buckets, with short
// leases that end during the run; a slot's release by the refund script, its
// renewal by renew_slots.lua (a slot already gone stays gone), and a batch.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "support/script_redis.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

namespace concurrency_script_test {

LimitDescriptor slots(std::string limit, double capacity, double lease_ms) {
  LimitDescriptor d = bucket(std::move(limit), "c", capacity, 0);
  d.algorithm = sluice::LimitAlgorithm::kConcurrency;
  d.lease_ms = lease_ms;
  return d;
}

// A slot's member in Redis: its number as a whole decimal (what the script
// writes, and what slot_member() gives back with ZREM).
std::string fmt_slot(double slot) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", slot);
  CHECK(sluice::slot_member(slot) == text);
  return text;
}

// The slots in Redis: member -> the end of its lease (us).
std::map<std::string, double> stored_slots(Redis& redis, const std::string& key) {
  Reply r = redis.command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
  REQUIRE(r->type == REDIS_REPLY_ARRAY);
  std::map<std::string, double> out;
  for (std::size_t i = 0; i + 1 < r->elements; i += 2) {
    out[r->element[i]->str] = std::stod(r->element[i + 1]->str);
  }
  return out;
}

TEST_CASE("script: concurrency slots decide exactly like the C++ twin, leases ending",
          "[ratelimit][script][redis][concurrency]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  // Leases of 30 and 80 ms, so that slots come back within the run.
  const std::vector<LimitDescriptor> pool = {slots("c1", 3, 30), slots("c2", 5, 80),
                                             bucket("t", "t", 3, 20)};
  const LimitDescriptor clock = bucket("clock", "clock", 1e12, 1);
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
    for (auto& l : limits) {
      l.shadow = rng.next(6) == 0;
      l.slot = sluice::next_slot_number();
    }
    limits.push_back(clock);
    const double cost = 1 + rng.next(3);
    std::vector<BucketState> states;
    for (const auto& l : limits) states.push_back(twin[key_of(l)]);
    const std::int64_t t0 = redis.time_us();
    const RateDecision decided = redis.decide(limits, cost);
    const std::int64_t t1 = redis.time_us();
    if (decided.allowed) {
      ++allowed;
      const std::int64_t now = redis.stored(key_of(clock)).timestamp_us;
      check_equal(decided, sluice::decide_limits(states, limits, cost, now));
      for (std::size_t i = 0; i < limits.size(); ++i) twin[key_of(limits[i])] = states[i];
    } else {
      ++denied;
      std::vector<BucketState> at_t0 = states;
      check_denied_between(decided, sluice::decide_limits(at_t0, limits, cost, t0),
                           sluice::decide_limits(states, limits, cost, t1));
    }
    // The lease ends in Redis are the twin's, once both drop the ended ones.
    for (std::size_t i = 0; i < limits.size(); ++i) {
      if (limits[i].algorithm != sluice::LimitAlgorithm::kConcurrency) continue;
      BucketState theirs;
      for (const auto& [member, end] : stored_slots(redis, key_of(limits[i]))) {
        theirs.log.push_back(end);
      }
      std::sort(theirs.log.begin(), theirs.log.end());
      BucketState mine = twin[key_of(limits[i])];
      sluice::drop_ended_slots(theirs, t1);
      sluice::drop_ended_slots(mine, t1);
      CHECK(theirs.log == mine.log);
    }
  }
  INFO("allowed " << allowed << ", denied " << denied);
  CHECK(allowed >= 40);
  CHECK(denied >= 40);
}

TEST_CASE("script: a slot is released by the refund script and renewed until it is gone",
          "[ratelimit][script][redis][concurrency]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  LimitDescriptor a = slots("c", 2, 60000);
  a.slot = sluice::next_slot_number();
  LimitDescriptor b = a;
  b.slot = sluice::next_slot_number();
  LimitDescriptor c = a;
  c.slot = sluice::next_slot_number();
  // A batch of three requests: two slots, then none free.
  const std::vector<sluice::BatchRequest> batch = {{&a, 1}, {&b, 1}, {&c, 1}};
  const std::vector<RateDecision> decisions = redis.decide_batch(batch);
  REQUIRE(decisions.size() == 3);
  CHECK(decisions[0].allowed);
  CHECK(decisions[1].allowed);
  CHECK_FALSE(decisions[2].allowed);
  CHECK(decisions[2].limits[0].seconds_to_cost == 1);
  CHECK(stored_slots(redis, key_of(a)).size() == 2);
  // Renewing moves a held slot's lease end; c was never taken: nothing to renew.
  const double before = stored_slots(redis, key_of(a)).begin()->second;
  CHECK(redis.renew({a, b, c}) == 2);
  CHECK(stored_slots(redis, key_of(a)).begin()->second > before);
  CHECK(redis.pttl(key_of(a)) > 60000);
  // a's release frees its slot: c gets it.
  CHECK(redis.refund({a}, 1) == 1);
  CHECK(redis.refund({a}, 1) == 0);  // once
  CHECK(redis.renew({a}) == 0);      // a released slot stays gone
  CHECK(redis.decide({c}, 1).allowed);
  const auto held = stored_slots(redis, key_of(c));
  CHECK(held.size() == 2);
  CHECK(held.count(fmt_slot(c.slot)) == 1);
  // The gateway's plain release on one Redis: ZREM of the slot's member.
  Reply removed = redis.command({"ZREM", key_of(c), sluice::slot_member(c.slot)});
  REQUIRE(removed->type == REDIS_REPLY_INTEGER);
  CHECK(removed->integer == 1);
}

TEST_CASE("script: an ended slot is not counted, and is dropped by one admission in 16",
          "[ratelimit][script][redis][concurrency]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  LimitDescriptor d = slots("c", 2, 60000);
  // Two slots whose lease ended (an instance that stopped renewing), and a
  // value of another shape under a second key.
  const std::string key = key_of(d);
  redis.command({"ZADD", key, "1", "1001", "2", "1002"});
  const double unpruned = std::floor(sluice::next_slot_number() / 16) * 16 + 1;
  d.slot = unpruned;
  const RateDecision first = redis.decide({d}, 1);
  CHECK(first.allowed);
  CHECK(first.limits[0].remaining == 1);     // the ended ones are not counted
  CHECK(stored_slots(redis, key).size() == 3);  // nor dropped by this slot number
  d.slot = unpruned + 15;                     // a multiple of 16
  const RateDecision second = redis.decide({d}, 1);
  CHECK(second.allowed);
  CHECK(second.limits[0].remaining == 0);
  const auto held = stored_slots(redis, key);
  CHECK(held.size() == 2);
  CHECK(held.count("1001") == 0);
  CHECK(held.count(fmt_slot(unpruned)) == 1);

  LimitDescriptor other = slots("o", 2, 60000);
  redis.command({"SET", key_of(other), "not a set"});
  other.slot = sluice::next_slot_number();
  CHECK(redis.decide({other}, 1).allowed);  // dropped, not an error
  CHECK(stored_slots(redis, key_of(other)).size() == 1);
}

}  // namespace concurrency_script_test
