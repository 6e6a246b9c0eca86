// Component test: sliding windows in the rate-limit script on a real
// redis-server: the refund script, one enforced window alone (the packed
// reply) against the C++ twin at a moment of the call, and a batch. The run
// of windows mixed with token buckets against the twin is a row of
// test_twin_vs_script.cpp.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "support/script_limits.hpp"
#include "support/script_redis.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

namespace sliding_window_script_test {

TEST_CASE("script: the refund script takes a window's count back while it is current",
          "[ratelimit][script][redis][sliding_window]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  const LimitDescriptor w = window("w", 10, 1000);  // one window for the whole test
  auto refund = [&](double tokens) { return redis.refund({w}, tokens); };
  CHECK(refund(1) == 0);  // no window yet: nothing to take back
  REQUIRE(redis.decide({w}, 3).allowed);
  REQUIRE(redis.decide({w}, 2).allowed);
  CHECK(stored_window(redis, key_of(w)).tokens == 5);
  CHECK(refund(2) == 1);
  CHECK(stored_window(redis, key_of(w)).tokens == 3);
  CHECK(refund(7) == 1);
  CHECK(stored_window(redis, key_of(w)).tokens == 0);  // never below 0
  CHECK(redis.pttl(key_of(w)) > 1'000'000);
}

// Every field of `script` equals `twin` exactly.
bool same_decision(const RateDecision& script, const RateDecision& twin) {
  if (script.allowed != twin.allowed || script.limits.size() != twin.limits.size() ||
      script.delay_seconds != twin.delay_seconds) {
    return false;
  }
  for (std::size_t i = 0; i < twin.limits.size(); ++i) {
    const auto& s = script.limits[i];
    const auto& t = twin.limits[i];
    if (s.sufficient != t.sufficient || s.remaining != t.remaining ||
        s.seconds_to_cost != t.seconds_to_cost || s.seconds_to_full != t.seconds_to_full ||
        s.leased != t.leased || s.wait_seconds != t.wait_seconds) {
      return false;
    }
  }
  return true;
}

TEST_CASE("script: one enforced sliding window alone (the packed reply) decides exactly like the "
          "C++ twin at a moment of the call",
          "[ratelimit][script][redis][sliding_window]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;

  // Tight windows for denials and reservations, a roomy one (w4) so that
  // admissions come up however fast the machine makes its calls.
  const std::vector<LimitDescriptor> pool = {window("w1", 4, 0.05), window("w2", 2.5, 0.02),
                                             window("w3", 10, 0.2), window("w4", 200, 0.01)};
  const double costs[] = {1, 0.5, 2};
  const double max_waits[] = {0, 0, 0.01, 1};
  std::map<std::string, BucketState> twin;
  Lcg rng;
  int allowed = 0;
  int denied = 0;
  int reserved = 0;
  int checked = 0;
  // At least 600 steps, and more (up to 3000) until each outcome came up
  // often enough: a fast machine crosses fewer window boundaries per step.
  const auto enough = [&] { return allowed >= 40 && denied >= 40 && reserved >= 5; };
  for (int step = 0; step < 3000 && (step < 600 || !enough()); ++step) {
    CAPTURE(step);
    LimitDescriptor limit = pool[rng.next(4)];
    limit.max_wait_seconds = max_waits[rng.next(4)];
    const double cost = costs[rng.next(3)];
    const std::vector<LimitDescriptor> limits = {limit};
    const BucketState before = twin[key_of(limit)];

    const std::int64_t t0 = redis.time_us();
    const RateDecision script = redis.decide(limits, cost);
    const std::int64_t t1 = redis.time_us();
    const BucketState stored = stored_window(redis, key_of(limit));
    const std::int64_t t2 = redis.time_us();
    // The script read TIME once between t0 and t1: the twin, decided at one
    // of those microseconds, answers exactly what it answered and stores
    // exactly what it stored. A step that took over 10 ms (a busy machine;
    // the shortest key lives 20 ms) is not checked, nor counted; the twin
    // goes on from what was stored, or from nothing if the key went.
    if (t2 - t0 > 10'000) {
      twin[key_of(limit)] = stored;
      continue;
    }
    bool found = false;
    BucketState after;
    for (std::int64_t now = t0; now <= t1 && !found; ++now) {
      std::vector<BucketState> states = {before};
      if (!same_decision(script, sluice::decide_limits(states, limits, cost, now))) continue;
      if (script.allowed && (stored.tokens != states[0].tokens ||
                             stored.previous != states[0].previous ||
                             stored.timestamp_us != states[0].timestamp_us)) {
        continue;
      }
      found = true;
      after = states[0];
    }
    INFO("TIME " << t0 << ".." << t1 << ", allowed " << script.allowed << ", remaining "
                 << script.limits[0].remaining);
    REQUIRE(found);
    ++checked;
    if (script.allowed) {
      ++allowed;
      if (script.delay_seconds > 0) ++reserved;
      twin[key_of(limit)] = after;
      check_window_ttl(redis, limit, t0);
    } else {
      ++denied;
    }
  }
  INFO("checked " << checked << ", allowed " << allowed << ", denied " << denied << ", reserved "
                  << reserved);
  CHECK(checked >= 300);
  CHECK(allowed >= 40);
  CHECK(denied >= 40);
  CHECK(reserved >= 5);
}

TEST_CASE("script: a batch of sliding windows and token buckets decides each request as it "
          "would alone, in order",
          "[ratelimit][script][redis][sliding_window]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  // Fresh keys in windows of 1000 s: no previous count, so the estimate is
  // the count itself.
  const LimitDescriptor w = window("w", 3, 1000);
  const LimitDescriptor t = bucket("t", "t", 2, 1e-3);
  LimitDescriptor r = window("r", 1, 1000);
  r.max_wait_seconds = 5000;  // a reservation must go within this window: none here
  const std::vector<sluice::BatchRequest> batch = {{&w, 2}, {&t, 1}, {&w, 2}, {&w, 1},
                                                   {&r, 1}, {&r, 1}};
  const std::vector<RateDecision> decisions = redis.decide_batch(batch);
  REQUIRE(decisions.size() == 6);
  CHECK(decisions[0].allowed);
  CHECK(decisions[0].limits[0].sufficient);
  CHECK(decisions[0].limits[0].remaining == 1);
  CHECK(decisions[1].allowed);
  CHECK_FALSE(decisions[2].allowed);  // the first took 2 of 3
  CHECK(decisions[2].limits[0].remaining == 1);
  CHECK(decisions[3].allowed);
  CHECK(decisions[3].limits[0].remaining == 0);
  CHECK(decisions[4].allowed);
  CHECK_FALSE(decisions[5].allowed);
  CHECK(decisions[5].delay_seconds == 0);
  CHECK(stored_window(redis, key_of(w)).tokens == 3);
  CHECK(stored_window(redis, key_of(r)).tokens == 1);
  // The same requests one call each, on fresh keys, decide the same.
  const LimitDescriptor fresh = window("again", 3, 1000);
  const bool alone[] = {redis.decide({fresh}, 2).allowed, redis.decide({fresh}, 2).allowed,
                        redis.decide({fresh}, 1).allowed};
  CHECK(alone[0] == decisions[0].allowed);
  CHECK(alone[1] == decisions[2].allowed);
  CHECK(alone[2] == decisions[3].allowed);
  CHECK(stored_window(redis, key_of(fresh)).tokens == stored_window(redis, key_of(w)).tokens);
}

TEST_CASE("script: a node batch (its keys as arguments) decides as a batch does",
          "[ratelimit][script][redis][cluster]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  // The test above's requests, on keys of their own for each kind of call.
  const auto requests = [](const std::string& name, LimitDescriptor& w, LimitDescriptor& t,
                           LimitDescriptor& r) {
    w = window(name + "w", 3, 1000);
    t = bucket(name + "t", name + "t", 2, 1e-3);
    r = window(name + "r", 1, 1000);
    r.max_wait_seconds = 5000;
    return std::vector<sluice::BatchRequest>{{&w, 2}, {&t, 1}, {&w, 2}, {&w, 1}, {&r, 1}, {&r, 1}};
  };
  LimitDescriptor w1, t1, r1, w2, t2, r2;
  const std::vector<RateDecision> batch = redis.decide_batch(requests("plain-", w1, t1, r1));
  const std::vector<std::optional<RateDecision>> node =
      redis.decide_node_batch(requests("node-", w2, t2, r2));
  REQUIRE(node.size() == batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    CAPTURE(i);
    REQUIRE(node[i]);  // one Redis serves every key
    CHECK(node[i]->allowed == batch[i].allowed);
    CHECK(node[i]->limits[0].remaining == batch[i].limits[0].remaining);
    CHECK(node[i]->limits[0].sufficient == batch[i].limits[0].sufficient);
  }
  CHECK(stored_window(redis, key_of(w2)).tokens == stored_window(redis, key_of(w1)).tokens);
  CHECK(stored_window(redis, key_of(r2)).tokens == stored_window(redis, key_of(r1)).tokens);
}

}  // namespace sliding_window_script_test
