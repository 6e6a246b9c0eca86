// Component test: a decision call that Redis runs after its deadline (it was
// busy, the call waited behind another) changes nothing, on a real
// redis-server: the caller has stopped waiting and answered without it, so
// tokens it took or a slot it held would never be given back.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "support/script_redis.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

namespace script_deadline_test {

// Keeps Redis busy for `us` microseconds (one script: nothing else runs).
constexpr const char* kBusyScript =
    "local s = redis.call('TIME') repeat local n = redis.call('TIME') "
    "until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1])";

LimitDescriptor slot_limit(double slot) {
  LimitDescriptor d = bucket("in_flight", "k", 1, 0);
  d.algorithm = sluice::LimitAlgorithm::kConcurrency;
  d.slot = slot;
  d.lease_ms = 30000;
  return d;
}

// Sends `command` right behind a script that keeps Redis busy for 300 ms, on
// one connection (so in that order), and answers its reply.
Reply behind_busy_script(Redis& redis, const std::vector<std::string>& command) {
  redis.append({"EVAL", kBusyScript, "0", "300000"});
  redis.append(command);
  redis.get_reply();
  return redis.get_reply();
}

TEST_CASE("script: a decision Redis runs past its deadline changes nothing",
          "[ratelimit][script][redis]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  sluice::LimitsCodec codec;
  codec.set_deadline_after(std::chrono::milliseconds(100));
  const LimitDescriptor tokens = bucket("tokens", "k", 10, 1);
  const LimitDescriptor slot = slot_limit(16);

  SECTION("several limits") {
    const Reply r = behind_busy_script(redis, redis.script_args({tokens, slot}, 3, codec));
    REQUIRE(r->type == REDIS_REPLY_ERROR);
    CHECK_THAT(std::string(r->str, r->len), Catch::Matchers::Contains("past its deadline"));
    CHECK(redis.pttl(key_of(tokens)) == -2);
    CHECK(redis.pttl(key_of(slot)) == -2);
  }
  SECTION("one limit alone") {
    const Reply r = behind_busy_script(redis, redis.script_args({slot}, 1, codec));
    REQUIRE(r->type == REDIS_REPLY_ERROR);
    CHECK(redis.pttl(key_of(slot)) == -2);
  }
  SECTION("a batch") {
    const std::vector<sluice::BatchRequest> batch = {{&tokens, 1}, {&tokens, 2}};
    std::vector<std::string> command = redis.batch_args(batch);
    // batch_args encodes with the shared codec: the deadline (its last
    // argument) is replaced by this one's.
    const std::vector<std::string> own = codec.encode_batch_args(batch);
    command.back() = own.back();
    const Reply r = behind_busy_script(redis, command);
    REQUIRE(r->type == REDIS_REPLY_ERROR);
    CHECK(redis.pttl(key_of(tokens)) == -2);
  }
  // In time, the same call is decided and written.
  const RateDecision in_time = [&] {
    const Reply r = redis.command(redis.script_args({tokens, slot}, 3, codec));
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    return redis.decide({tokens}, 0);
  }();
  CHECK(in_time.limits[0].remaining >= 7);
  CHECK(in_time.limits[0].remaining < 8);
  CHECK(redis.pttl(key_of(slot)) > 0);
}

TEST_CASE("script: a deadline already past is refused before anything is read",
          "[ratelimit][script][redis]") {
  if (skip_without_redis()) return;
  ScriptServer script;
  Redis& redis = script.redis;
  sluice::LimitsCodec codec;
  codec.set_deadline_after(std::chrono::milliseconds(-1000));
  const LimitDescriptor tokens = bucket("tokens", "k", 10, 1);
  const Reply r = redis.command(redis.script_args({tokens}, 1, codec));
  REQUIRE(r->type == REDIS_REPLY_ERROR);
  CHECK_THAT(std::string(r->str, r->len), Catch::Matchers::Contains("past its deadline"));
  CHECK(redis.pttl(key_of(tokens)) == -2);
}

}  // namespace script_deadline_test
