// Component test: sliding logs in the rate-limit script on a real
// redis-server: a batch; refunds that remove their own request's units,
// interleaved with later admissions; the bucket read. The run of logs mixed
// with other limits against the C++ twin is a row of test_twin_vs_script.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/algorithms/concurrency.hpp"
#include "support/script_limits.hpp"
#include "support/script_redis.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

namespace sliding_log_script_test {

// A request's own descriptor of `log`: a new number names its units.
LimitDescriptor request_of(const LimitDescriptor& log) {
  LimitDescriptor d = log;
  d.slot = sluice::next_slot_number();
  return d;
}

// The log in Redis: its members, oldest first (members of one TIME by name).
std::vector<std::string> members(Redis& redis, const std::string& key) {
  Reply r = redis.command({"ZRANGE", key, "0", "-1"});
  REQUIRE(r->type == REDIS_REPLY_ARRAY);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < r->elements; ++i) names.emplace_back(r->element[i]->str);
  return names;
}

// A request's member j as the scripts name it.
std::string member(const LimitDescriptor& request, std::string_view j) {
  return sluice::slot_member(request.slot) + ":" + std::string(j);
}

TEST_CASE("script: a batch of sliding logs decides in order; refunds and reads",
          "[ratelimit][script][redis][sliding_log]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  const LimitDescriptor l = log_limit("l", 3, 1000);
  const LimitDescriptor r[] = {request_of(l), request_of(l), request_of(l), request_of(l)};
  const std::vector<sluice::BatchRequest> batch = {{&r[0], 2}, {&r[1], 2}, {&r[2], 1}, {&r[3], 1}};
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

  // A refund takes its own request's units back, not the newest; a key that
  // is no log gives nothing.
  CHECK(redis.refund({r[0]}, 2) == 1);
  CHECK(members(redis, key_of(l)) == std::vector<std::string>{member(r[2], "1")});
  const LimitDescriptor none = log_limit("none", 3, 1000);
  CHECK(redis.refund({none}, 1) == 0);

  // A value of another algorithm under a log's key is dropped, not an error.
  const LimitDescriptor other = bucket("l", "l", 3, 1);
  REQUIRE(key_of(other) == key_of(l));
  REQUIRE(redis.decide({other}, 1).allowed);
  const RateDecision after = redis.decide({request_of(l)}, 1);
  CHECK(after.allowed);
  CHECK(after.limits[0].remaining == 2);
}

// The newest entry's score: the admission time of the request just admitted.
std::int64_t newest_score(Redis& redis, const std::string& key) {
  Reply r = redis.command({"ZRANGE", key, "-1", "-1", "WITHSCORES"});
  REQUIRE(r->type == REDIS_REPLY_ARRAY);
  REQUIRE(r->elements == 2);
  return std::stoll(r->element[1]->str);
}

TEST_CASE("script: refunds sent after later admissions leave at most capacity in every window",
          "[ratelimit][script][redis][sliding_log]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  // Capacity 20 per 200 ms, kept full for five windows. Each request is
  // admitted at an estimate of 1 to 4 units and really costs 0 to its
  // estimate; the refund of the difference is sent after the next request
  // was admitted, as settlements of overlapping requests arrive.
  constexpr double kCapacity = 20;
  constexpr double kWindowSeconds = 0.2;
  const LimitDescriptor log = log_limit("l", kCapacity, kWindowSeconds);
  struct Admitted {
    std::int64_t at_us;
    double real;
  };
  std::vector<Admitted> admitted;
  LimitDescriptor unsettled;  // the request admitted last, and its refund to come
  double unsettled_units = 0;
  Lcg rng;
  const std::int64_t start = redis.time_us();
  int refunds = 0;
  while (redis.time_us() - start < 5 * kWindowSeconds * 1e6) {
    const LimitDescriptor request = request_of(log);
    const double estimate = 1 + rng.next(4);
    const double real = rng.next(static_cast<std::uint32_t>(estimate) + 1);
    if (!redis.decide({request}, estimate).allowed) continue;
    admitted.push_back({newest_score(redis, key_of(log)), real});
    if (unsettled_units > 0) {
      CHECK(redis.refund({unsettled}, unsettled_units) == 1);
      ++refunds;
    }
    unsettled = request;
    unsettled_units = estimate - real;
  }
  // The real units admitted in the window ending at each admission (the
  // window's count only grows at admissions).
  const auto window_us = static_cast<std::int64_t>(kWindowSeconds * 1e6);
  double most = 0;
  for (const Admitted& end : admitted) {
    double units = 0;
    for (const Admitted& a : admitted) {
      if (a.at_us > end.at_us - window_us && a.at_us <= end.at_us) units += a.real;
    }
    most = std::max(most, units);
  }
  INFO(admitted.size() << " admitted, " << refunds << " refunds");
  CHECK(refunds >= 30);
  CHECK(most <= kCapacity);
  CHECK(most >= kCapacity - 4);  // the log was kept full
}

TEST_CASE("script: a log names each request's units, and a refund or debit touches its own only",
          "[ratelimit][script][redis][sliding_log]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  const LimitDescriptor log = log_limit("l", 10, 0.3);
  const std::string key = key_of(log);
  const LimitDescriptor a = request_of(log);
  REQUIRE(redis.decide({a}, 2.5).allowed);  // three units
  CHECK(members(redis, key) ==
        std::vector<std::string>{member(a, "1"), member(a, "2"), member(a, "3")});
  // Entries an earlier version wrote ("<time>-<n>"): one in the window counts,
  // one that has left is dropped as the log is read; no request's refund
  // touches them.
  const std::int64_t now = redis.time_us();
  const std::string kept = std::to_string(now) + "-1";
  const std::string gone = std::to_string(now - 400'000) + "-2";
  redis.command({"ZADD", key, std::to_string(now), kept, std::to_string(now - 400'000), gone});
  const LimitDescriptor b = request_of(log);
  const RateDecision decided = redis.decide({b}, 2);
  REQUIRE(decided.allowed);
  CHECK(decided.limits[0].remaining == 10 - 3 - 1 - 2);
  CHECK(redis.command({"ZSCORE", key, gone})->type == REDIS_REPLY_NIL);
  // A partial refund removes that many of its request's units; another
  // request's debit adds units named apart; a refund sent twice takes once.
  CHECK(redis.refund({a}, 2) == 1);
  CHECK(redis.refund({b}, -2, 100) == 1);
  CHECK(redis.refund({a}, 2) == 1);
  std::vector<std::string> left = members(redis, key);
  std::sort(left.begin(), left.end());
  std::vector<std::string> expected = {kept,           member(a, "3"),  member(b, "1"),
                                       member(b, "2"), member(b, "d1"), member(b, "d2")};
  std::sort(expected.begin(), expected.end());
  CHECK(left == expected);
}

}  // namespace sliding_log_script_test
