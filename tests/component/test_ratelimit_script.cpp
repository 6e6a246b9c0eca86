// Component test: token buckets in the Lua script in a real redis-server:
// stored states, clock skew and odd values against the C++ twin, the refund
// script, leases, a batch, and the cost per call. The script takes its time
// from Redis; an allowed call's stored timestamp gives its exact time, so the
// twin is checked bit for bit. The random run against the twin is a row of
// test_twin_vs_script.cpp.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "middleware/ratelimit/algorithms/limits.hpp"
#include "middleware/ratelimit/algorithms/limits_codec.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"
#include "support/script_redis.hpp"
#include "upstream/redis/codec.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

TEST_CASE("script: stored states, clock skew, odd values", "[ratelimit][script][redis]") {
  if (skip_without_redis()) return;
  // One limit takes the script's single-bucket path; a second, roomy bucket
  // after it takes the general path. Both must behave alike.
  const bool with_extra = GENERATE(false, true);
  CAPTURE(with_extra);
  const LimitDescriptor extra = bucket("z", "z", 100, 1);
  auto with = [&](std::vector<LimitDescriptor> limits) {
    if (with_extra) limits.push_back(extra);
    return limits;
  };
  ScriptServer script;
  Redis& redis = script.redis;

  SECTION("refill from a stored past state") {
    const std::vector<LimitDescriptor> limits = with({bucket("p", "p", 4, 0.5)});
    std::vector<BucketState> states(limits.size());
    states[0] = {1.25, redis.time_us() - 3'000'000, true};
    redis.store(key_of(bucket("p", "p", 0, 0)), states[0]);
    const RateDecision script = redis.decide(limits, 2);
    REQUIRE(script.allowed);
    const std::int64_t now = redis.stored(key_of(bucket("p", "p", 0, 0))).timestamp_us;
    check_equal(script, sluice::decide_limits(states, limits, 2, now));
    CHECK(script.limits[0].remaining == Approx(0.75).margin(0.01));
  }
  SECTION("a timestamp in the future: no refill, the later time is kept") {
    const std::vector<LimitDescriptor> limits = with({bucket("f", "f", 10, 1000)});
    const std::int64_t future = redis.time_us() + 10'000'000;
    redis.store(key_of(bucket("f", "f", 0, 0)), {2.5, future, true});
    const RateDecision script = redis.decide(limits, 1);
    REQUIRE(script.allowed);
    CHECK(script.limits[0].remaining == 1.5);
    const BucketState stored = redis.stored(key_of(bucket("f", "f", 0, 0)));
    CHECK(stored.tokens == 1.5);
    CHECK(stored.timestamp_us == future);
  }
  SECTION("a value of another shape counts as a new, full bucket") {
    REQUIRE(redis.command({"SET", key_of(bucket("g", "g", 0, 0)), "garbage"})->type ==
            REDIS_REPLY_STATUS);
    const RateDecision script = redis.decide(with({bucket("g", "g", 3, 1)}), 1);
    REQUIRE(script.allowed);
    CHECK(script.limits[0].remaining == 2);
    CHECK(redis.stored(key_of(bucket("g", "g", 0, 0))).tokens == 2);
  }
  SECTION("a key of another type (a hash) counts as a new, full bucket and is replaced") {
    // MGET reads it as absent where GET would fail every call on that bucket.
    REQUIRE(redis.command({"HSET", key_of(bucket("t", "t", 0, 0)), "f", "v"})->type ==
            REDIS_REPLY_INTEGER);
    const RateDecision script = redis.decide(with({bucket("t", "t", 3, 1)}), 1);
    REQUIRE(script.allowed);
    CHECK(script.limits[0].remaining == 2);
    CHECK(redis.stored(key_of(bucket("t", "t", 0, 0))).tokens == 2);
  }
  SECTION("cost above capacity: denied, never available, nothing written") {
    const RateDecision script = redis.decide(with({bucket("h", "h", 3, 1)}), 4);
    CHECK_FALSE(script.allowed);
    CHECK_FALSE(script.limits[0].sufficient);
    CHECK(script.limits[0].remaining == 3);
    CHECK(script.limits[0].seconds_to_cost == std::numeric_limits<double>::infinity());
    CHECK(script.limits[0].seconds_to_full == 0);
    CHECK(redis.command({"EXISTS", key_of(bucket("h", "h", 0, 0))})->integer == 0);
    if (with_extra) {
      CHECK(script.limits[1].sufficient);
      CHECK(script.limits[1].remaining == 100);
      CHECK(script.limits[1].seconds_to_cost == 0);
      CHECK(redis.command({"EXISTS", key_of(bucket("z", "z", 0, 0))})->integer == 0);
    }
  }
  SECTION("a refill rate of 0: a short bucket never refills") {
    const std::vector<LimitDescriptor> limits = with({bucket("r", "r", 2, 0)});
    REQUIRE(redis.decide(limits, 1.5).allowed);
    CHECK(redis.pttl(key_of(bucket("r", "r", 0, 0))) > sluice::kMaxBucketTtlMs - 10'000);
    const RateDecision script = redis.decide(limits, 1.5);
    CHECK_FALSE(script.allowed);
    CHECK(script.limits[0].remaining == 0.5);
    CHECK(script.limits[0].seconds_to_cost == std::numeric_limits<double>::infinity());
    CHECK(script.limits[0].seconds_to_full == std::numeric_limits<double>::infinity());
  }
  SECTION("a short bucket within its max wait is reserved: below zero, with its wait") {
    LimitDescriptor limit = bucket("w", "w", 2, 1e-3);
    limit.max_wait_seconds = 1000;
    const std::vector<LimitDescriptor> limits = with({limit});
    REQUIRE(redis.decide(limits, 1.5).allowed);
    const RateDecision script = redis.decide(limits, 1.5);
    REQUIRE(script.allowed);
    CHECK_FALSE(script.limits[0].sufficient);
    CHECK(script.limits[0].wait_seconds == Approx(1000).margin(1));
    CHECK(script.delay_seconds == script.limits[0].wait_seconds);
    CHECK(script.limits[0].remaining == Approx(-1).margin(0.01));
    CHECK(redis.stored(key_of(limit)).tokens == script.limits[0].remaining);
    // Below zero, the key lives until the bucket would be full again: 3 tokens
    // at 0.001 per second, not the 2 of a refill from empty.
    CHECK(redis.pttl(key_of(limit)) > 3'000'000);
    CHECK(redis.pttl(key_of(limit)) <= 3'001'000);
    CHECK_FALSE(redis.decide(limits, 1.5).allowed);  // a wait beyond 1000 s
  }
  SECTION("a short shadow bucket admits and is not written") {
    LimitDescriptor limit = bucket("s", "s", 1, 1e-3);
    limit.shadow = true;
    const std::vector<LimitDescriptor> limits = with({limit});
    REQUIRE(redis.decide(limits, 1).allowed);
    CHECK(redis.stored(key_of(limit)).tokens == 0);
    const RateDecision script = redis.decide(limits, 1);
    CHECK(script.allowed);
    CHECK_FALSE(script.limits[0].sufficient);
    CHECK(script.delay_seconds == 0);
    CHECK(redis.stored(key_of(limit)).tokens == Approx(0).margin(0.01));
    if (with_extra) CHECK(redis.stored(key_of(extra)).tokens == Approx(98).margin(0.01));
  }
  SECTION("no keys: allowed") {
    Reply r = redis.command({"EVALSHA", script_sha1(), "0", "1"});
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    REQUIRE(r->elements == 1);
    CHECK(r->element[0]->integer == 1);
    CHECK(redis.decide({}, 1).allowed);
  }
  SECTION("TTL about capacity / rate on every key written") {
    const std::vector<LimitDescriptor> limits = {bucket("x", "x", 5, 0.001),
                                                 bucket("y", "y", 60, 30)};
    REQUIRE(redis.decide(limits, 1).allowed);
    CHECK(redis.pttl(key_of(bucket("x", "x", 0, 0))) <= 5'001'000);
    CHECK(redis.pttl(key_of(bucket("x", "x", 0, 0))) > 4'999'000);
    CHECK(redis.pttl(key_of(bucket("y", "y", 0, 0))) <= 3'000);
    CHECK(redis.pttl(key_of(bucket("y", "y", 0, 0))) > 1'000);
  }
}

TEST_CASE("script: the refund script gives a debit back, capped, and leaves gone buckets gone",
          "[ratelimit][script][redis]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  // A refill so slow that no token comes back during the test.
  const LimitDescriptor a = bucket("a", "x", 10, 1e-9);
  const LimitDescriptor b = bucket("b", "x", 5, 1e-9);
  auto refund = [&](const std::vector<LimitDescriptor>& limits, double tokens) {
    return redis.refund(limits, tokens);
  };
  SECTION("one bucket: debit 3 twice, refund 3: 7 tokens, and the expiry is renewed") {
    REQUIRE(redis.decide({a}, 3).allowed);
    REQUIRE(redis.decide({a}, 3).allowed);
    CHECK(redis.stored(key_of(a)).tokens == Approx(4));
    CHECK(refund({a}, 3) == 1);
    CHECK(redis.stored(key_of(a)).tokens == Approx(7));
    CHECK(redis.pttl(key_of(a)) > 1'000);
  }
  SECTION("two buckets: each gets its cost back, capped at its own capacity") {
    REQUIRE(redis.decide({a, b}, 2).allowed);
    CHECK(refund({a, b}, 2) == 2);
    CHECK(redis.stored(key_of(a)).tokens == Approx(10));
    CHECK(redis.stored(key_of(b)).tokens == Approx(5));
    CHECK(refund({a, b}, 2) == 2);  // a second refund cannot overfill
    CHECK(redis.stored(key_of(a)).tokens == Approx(10));
    CHECK(redis.stored(key_of(b)).tokens == Approx(5));
  }
  SECTION("a lease is taken with the request and its rest given back") {
    LimitDescriptor leased = a;
    leased.lease_want = 3;
    const RateDecision d = redis.decide({leased}, 1);
    REQUIRE(d.allowed);
    CHECK(d.limits[0].leased == 3);
    CHECK(redis.stored(key_of(a)).tokens == Approx(6));
    leased.lease_want = 100;  // at most half of what is left after the cost
    CHECK(redis.decide({leased}, 1).limits[0].leased == 2);
    CHECK(redis.stored(key_of(a)).tokens == Approx(3));
    CHECK(refund({a}, 2.5) == 1);
    CHECK(redis.stored(key_of(a)).tokens == Approx(5.5));
  }
  SECTION("a bucket that expired stays absent (it is full anyway)") {
    REQUIRE(redis.decide({a}, 3).allowed);
    redis.command({"DEL", key_of(a)});
    CHECK(refund({a}, 3) == 0);
    CHECK_FALSE(redis.stored(key_of(a)).exists);
  }
}

// Not run by default: prints the Redis CPU time per call (INFO commandstats),
// next to two baselines on the same server: an empty script, and the bare
// redis.calls of an allowed one-limit decision (TIME, GET, SET ... PX).
TEST_CASE("script: usec_per_call", "[.][perf][ratelimit-perf]") {
  if (!have_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  auto best_usec_per_call = [&](const std::vector<std::string>& args) {
    double best = 1e9;
    for (int round = 0; round < 10; ++round) {
      REQUIRE(redis.command({"CONFIG", "RESETSTAT"})->type == REDIS_REPLY_STATUS);
      constexpr int kCalls = 5000;
      for (int i = 0; i < kCalls; ++i) redis.append(args);
      for (int i = 0; i < kCalls; ++i) REQUIRE(redis.get_reply()->type != REDIS_REPLY_ERROR);
      Reply info = redis.command({"INFO", "commandstats"});
      const std::string text(info->str, info->len);
      const auto at = text.find("cmdstat_evalsha:");
      REQUIRE(at != std::string::npos);
      const auto usec = text.find("usec_per_call=", at);
      best = std::min(best, std::stod(text.substr(usec + 14)));
    }
    return best;
  };
  auto baseline = [&](const char* label, const std::string& body) {
    Reply sha = redis.command({"SCRIPT", "LOAD", body});
    REQUIRE(sha->type == REDIS_REPLY_STRING);
    std::cout << label << ": evalsha usec_per_call (best of 10 x 5000) = "
              << best_usec_per_call({"EVALSHA", sha->str, "1", "perf:base", "1", "2", "3"}) << "\n";
  };
  auto measure = [&](const char* label, const std::vector<LimitDescriptor>& limits, double cost) {
    redis.decide(limits, cost);  // create the keys
    std::cout << label << ": evalsha usec_per_call (best of 10 x 5000) = "
              << best_usec_per_call(redis.script_args(limits, cost)) << "\n";
  };
  baseline("baseline: return 1", "return 1");
  baseline("baseline: TIME, GET, SET PX",
           "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) "
           "redis.call('SET', KEYS[1], 'x', 'PX', 100000000) return {1, 1, '2', '3', '4'}");
  measure("1 limit, allowed", {bucket("a", "perf", 1e12, 1e6)}, 1);
  measure("1 limit, denied", {bucket("b", "perf", 1, 1e-9)}, 1);
  LimitDescriptor w = bucket("w", "perf", 1e12, 0);
  w.algorithm = sluice::LimitAlgorithm::kSlidingWindow;
  w.window_seconds = 60;
  measure("1 sliding window, allowed", {w}, 1);
  LimitDescriptor q = bucket("q", "perf", 1e12, 0);
  q.algorithm = sluice::LimitAlgorithm::kQuota;
  const double now = static_cast<double>(redis.time_us());
  q.periods = {now - 1e9, now + 1e10, now + 2e10};
  measure("1 quota, allowed", {q}, 1);
  LimitDescriptor l = bucket("l", "perf", 10000, 0);
  l.algorithm = sluice::LimitAlgorithm::kSlidingLog;
  l.window_seconds = 0.01;
  measure("1 sliding log (mostly empty), allowed", {l}, 1);
  measure("2 limits, allowed", {bucket("a", "perf", 1e12, 1e6), bucket("c", "perf", 1e12, 1e6)}, 1);
  // A batch of 8 requests, each its own sliding window (the batcher's call).
  std::vector<LimitDescriptor> windows;
  for (int i = 0; i < 8; ++i) {
    windows.push_back(w);
    windows.back().key_hash[0] = static_cast<std::uint8_t>(i);
  }
  std::vector<sluice::BatchRequest> batch;
  for (const LimitDescriptor& one : windows) batch.push_back({&one, 1});
  redis.decide_batch(batch);
  std::cout << "batch of 8 sliding windows: evalsha usec_per_call (best of 10 x 5000) = "
            << best_usec_per_call(redis.batch_args(batch)) << "\n";
  measure("3 limits, allowed",
          {bucket("a", "perf", 1e12, 1e6), bucket("c", "perf", 1e12, 1e6),
           bucket("d", "perf", 1e12, 1e6)},
          1);
}

TEST_CASE("script: a hot key's requests in one batch: one read and one write, the same end",
          "[ratelimit][script][redis]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  // Eight requests on a bucket of 5 and two on another, interleaved: each sees
  // the ones before it, whichever keys they debited.
  const LimitDescriptor hot = bucket("hot", "hot", 5, 1e-3);
  const LimitDescriptor other = bucket("other", "other", 1, 1e-3);
  std::vector<sluice::BatchRequest> batch;
  for (int i = 0; i < 8; ++i) {
    batch.push_back({&hot, 1});
    if (i == 2 || i == 5) batch.push_back({&other, 1});
  }
  redis.command({"CONFIG", "RESETSTAT"});
  const std::vector<RateDecision> decisions = redis.decide_batch(batch);
  REQUIRE(decisions.size() == 10);
  std::vector<bool> hot_allowed;
  std::vector<bool> other_allowed;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    (batch[i].bucket == &hot ? hot_allowed : other_allowed).push_back(decisions[i].allowed);
  }
  CHECK(hot_allowed == std::vector<bool>{true, true, true, true, true, false, false, false});
  CHECK(other_allowed == std::vector<bool>{true, false});
  CHECK(decisions.back().limits[0].remaining == Approx(0).margin(0.01));
  CHECK(redis.stored(key_of(hot)).tokens == Approx(0).margin(0.01));
  CHECK(redis.stored(key_of(other)).tokens == Approx(0).margin(0.01));
  // Written once each, with the expiry a single call gives it.
  const std::string stats = redis.command({"INFO", "commandstats"})->str;
  CHECK(stats.find("cmdstat_set:calls=2,") != std::string::npos);
  CHECK(stats.find("cmdstat_mget:calls=2,") != std::string::npos);
  const std::vector<sluice::BatchRequest> alone = {{&hot, 1}};
  const long long ttl = redis.pttl(key_of(hot));
  CHECK(ttl > 0);
  CHECK(ttl <= std::stoll(sluice::LimitsCodec{}.encode_batch_args(alone)[2]));
}

TEST_CASE("script: a batch decides each request as it would alone, in order",
          "[ratelimit][script][redis]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  // Two requests on one bucket of 3 (the second sees the first's debit), one
  // on a bucket of 1 taking 2 (denied, nothing written), one with a lease.
  const LimitDescriptor a = bucket("a", "a", 3, 1e-3);
  const LimitDescriptor b = bucket("b", "b", 1, 1e-3);
  LimitDescriptor c = bucket("c", "c", 100, 1e-3);
  c.lease_want = 10;
  const std::vector<sluice::BatchRequest> batch = {{&a, 2}, {&a, 2}, {&b, 2}, {&c, 1}};
  const std::vector<RateDecision> decisions = redis.decide_batch(batch);
  REQUIRE(decisions.size() == 4);
  CHECK(decisions[0].allowed);
  CHECK(decisions[0].limits[0].remaining == Approx(1).margin(0.01));
  CHECK_FALSE(decisions[1].allowed);  // 1 left of the 2 it asks
  CHECK(decisions[1].limits[0].remaining == Approx(1).margin(0.01));
  CHECK_FALSE(decisions[2].allowed);
  CHECK(decisions[2].limits[0].seconds_to_cost == std::numeric_limits<double>::infinity());
  CHECK(redis.command({"EXISTS", key_of(b)})->integer == 0);
  CHECK(decisions[3].allowed);
  CHECK(decisions[3].limits[0].leased == 10);
  CHECK(redis.stored(key_of(c)).tokens == Approx(89).margin(0.01));
  // The same requests one call each, on fresh buckets, decide the same.
  const std::string again = "again";
  const LimitDescriptor a2 = bucket("a", again, 3, 1e-3);
  CHECK(redis.decide({a2}, 2).allowed);
  CHECK_FALSE(redis.decide({a2}, 2).allowed);
  CHECK(redis.stored(key_of(a2)).tokens == Approx(redis.stored(key_of(a)).tokens).margin(0.01));
}
