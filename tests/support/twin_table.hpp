// The twin-vs-script table's driver: one row per algorithm says how a call
// of it is drawn, how an admitted call's TIME is read and what only it
// stores; run_twin_row() asks redis-server and the C++ twin (decide_limits) and
// compares them bit for bit. Test code only; synchronous.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "support/script_redis.hpp"

namespace sluice::test::script {

using Twin = std::map<std::string, BucketState>;  // the twin's state of each key

// One call of a row, as the driver saw it.
struct Call {
  std::vector<LimitDescriptor> limits;
  double cost = 0;
  // The twin's states before the call; after an admitted one, after it.
  std::vector<BucketState> states;
  std::int64_t t0 = 0;  // Redis' TIME before and after the call
  std::int64_t t1 = 0;
  RateDecision decided;
  std::string refused;  // the script's error, if it refused the call
};

// What a row's calls came to.
struct Tally {
  int allowed = 0;
  int denied = 0;
  int reserved = 0;  // allowed after a reservation (a delay)
  int skewed = 0;    // quota periods sent a period behind Redis' clock
  int refused = 0;
};

struct TwinRow {
  const char* name = "";
  int steps = 600;
  // The limits and cost of one call (step: its number), drawn from `rng`.
  std::function<Call(Redis&, Lcg&, int step, Twin&, Tally&)> draw = nullptr;
  // When an admitted call ran (the script's TIME), read from what it stored;
  // nullopt when it stored nothing to tell (then `unwritten` checks it).
  std::function<std::optional<std::int64_t>(Redis&, const Call&)> admitted_at = nullptr;
  std::function<void(Redis&, const Call&)> unwritten = nullptr;
  // A call the script refused (true: it was expected, and counted).
  std::function<bool(Redis&, const Call&, Tally&)> refused = nullptr;
  // Whether a denial can be compared with the twin at t0 and t1 (a quota
  // whose period ended in between cannot).
  std::function<bool(const Call&)> comparable = nullptr;
  bool denial_never_delays = false;
  // The stored values after an admitted call (the twin's states after it)
  // and after a denied one (the twin's before it).
  std::function<void(Redis&, const Call&)> after_allowed = nullptr;
  std::function<void(Redis&, const Call&)> after_denied = nullptr;
  // After every call, once the twin holds what it holds after it.
  std::function<void(Redis&, const Call&, Twin&)> after_each = nullptr;
  Tally at_least;  // the outcomes each row must have come up with
};

// The roomy token bucket whose stored timestamp tells an admitted call's TIME.
inline const LimitDescriptor kClock = bucket("clock", "clock", 1e12, 1);

inline std::optional<std::int64_t> clock_time(Redis& redis, const Call&) {
  return redis.stored(key_of(kClock)).timestamp_us;
}

// The limits of `pool` whose bit is set in `mask`, in pool order.
inline std::vector<LimitDescriptor> subset(const std::vector<LimitDescriptor>& pool,
                                           std::uint32_t mask) {
  std::vector<LimitDescriptor> limits;
  for (std::uint32_t k = 0; k < pool.size(); ++k) {
    if (mask & (1u << k)) limits.push_back(pool[k]);
  }
  return limits;
}

inline void run_twin_row(const TwinRow& row) {
  ScriptServer script;
  Redis& redis = script.redis;
  Twin twin;
  Lcg rng;
  Tally tally;
  for (int step = 0; step < row.steps; ++step) {
    CAPTURE(step);
    Call call = row.draw(redis, rng, step, twin, tally);
    for (const auto& l : call.limits) call.states.push_back(twin[key_of(l)]);
    call.t0 = redis.time_us();
    call.decided = redis.decide(call.limits, call.cost, row.refused ? &call.refused : nullptr);
    call.t1 = redis.time_us();
    if (!call.refused.empty()) {
      REQUIRE(row.refused);
      CHECK(row.refused(redis, call, tally));
      ++tally.refused;
      continue;
    }
    if (call.decided.allowed) {
      const std::optional<std::int64_t> now = row.admitted_at(redis, call);
      if (!now) {
        row.unwritten(redis, call);
        continue;
      }
      ++tally.allowed;
      if (call.decided.delay_seconds > 0) ++tally.reserved;
      REQUIRE(*now >= call.t0);
      REQUIRE(*now <= call.t1);
      check_equal(call.decided, sluice::decide_limits(call.states, call.limits, call.cost, *now));
      for (std::size_t i = 0; i < call.limits.size(); ++i) {
        twin[key_of(call.limits[i])] = call.states[i];
      }
      if (row.after_allowed) row.after_allowed(redis, call);
    } else {
      ++tally.denied;
      if (row.denial_never_delays) CHECK(call.decided.delay_seconds == 0);
      if (!row.comparable || row.comparable(call)) {
        // Tokens only grow with time: denied at t >= t0 means denied at t0,
        // and each value lies between the twin's at t0 and at t1.
        std::vector<BucketState> at_t0 = call.states;
        std::vector<BucketState> at_t1 = call.states;
        check_denied_between(call.decided,
                             sluice::decide_limits(at_t0, call.limits, call.cost, call.t0),
                             sluice::decide_limits(at_t1, call.limits, call.cost, call.t1));
      }
      if (row.after_denied) row.after_denied(redis, call);
    }
    if (row.after_each) row.after_each(redis, call, twin);
  }
  INFO("allowed " << tally.allowed << ", denied " << tally.denied << ", reserved " << tally.reserved
                  << ", skewed " << tally.skewed << ", refused " << tally.refused);
  CHECK(tally.allowed >= row.at_least.allowed);
  CHECK(tally.denied >= row.at_least.denied);
  CHECK(tally.reserved >= row.at_least.reserved);
  CHECK(tally.skewed >= row.at_least.skewed);
}

}  // namespace sluice::test::script
