// Component test: concurrency slots in the rate-limit script on a real
// redis-server: a slot's release by the refund script, its renewal by
// renew_slots.lua (a slot already gone stays gone), a batch, and ended
// slots. The run of slots with short leases mixed with token buckets against
// the C++ twin is a row of test_twin_vs_script.cpp.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "support/script_limits.hpp"
#include "support/script_redis.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

namespace concurrency_script_test {

// A slot's member in Redis: its number as a whole decimal (what the script
// writes, and what slot_member() gives back with ZREM).
std::string fmt_slot(double slot) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", slot);
  CHECK(sluice::slot_member(slot) == text);
  return text;
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
