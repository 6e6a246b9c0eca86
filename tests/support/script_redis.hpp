// What the script component tests share: a blocking hiredis connection to a
// test redis-server that runs the rate-limit script and reads stored buckets,
// a deterministic generator, and the bit-for-bit comparison with the twin.
// Test code only; synchronous.
#pragma once

#include <hiredis/hiredis.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "middleware/ratelimit/algorithms/limits.hpp"
#include "middleware/ratelimit/algorithms/limits_codec.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"
#include "support/redis_server_fixture.hpp"
#include "upstream/redis/codec.hpp"

namespace sluice::test::script {

using sluice::BucketState;
using sluice::LimitDescriptor;
using sluice::RateDecision;

static_assert(std::endian::native == std::endian::little, "the stored bucket is little-endian");

inline constexpr std::string_view kKeyPrefix = "sluice-test:";
inline const sluice::LimitsCodec kCodec;

// A bucket of limit `limit` whose key value is `key`.
inline LimitDescriptor bucket(std::string limit, std::string_view key, double capacity,
                              double rate) {
  return LimitDescriptor{std::move(limit), sluice::key_hash(key), capacity, rate};
}

// Its Redis key, as the limiter names it.
inline std::string key_of(const LimitDescriptor& limit) {
  return sluice::redis_key(kKeyPrefix, limit);
}

inline std::string script_sha1() {
  return sluice::redis::script_sha1(sluice::kDecideLimitsScript);
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// A blocking hiredis connection (the sync API is fine in tests).
class Redis {
 public:
  explicit Redis(std::uint16_t port) : ctx_(redisConnect("127.0.0.1", port)) {
    REQUIRE(ctx_ != nullptr);
    REQUIRE(ctx_->err == 0);
  }
  ~Redis() { redisFree(ctx_); }
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  Reply command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    REQUIRE(r != nullptr);
    return Reply(r);
  }
  void append(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    REQUIRE(redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) ==
            REDIS_OK);
  }
  Reply get_reply() {
    void* r = nullptr;
    REQUIRE(redisGetReply(ctx_, &r) == REDIS_OK);
    return Reply(static_cast<redisReply*>(r));
  }

  std::int64_t time_us() {
    Reply r = command({"TIME"});
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    REQUIRE(r->elements == 2);
    return std::stoll(r->element[0]->str) * 1'000'000 + std::stoll(r->element[1]->str);
  }

  std::vector<std::string> script_args(const std::vector<LimitDescriptor>& limits, double cost,
                                       const sluice::LimitsCodec& codec = kCodec) {
    const std::vector<std::string> keys = sluice::redis_keys(kKeyPrefix, limits);
    const std::vector<std::string> argv = codec.encode_args(limits, cost);
    std::vector<std::string> args = {"EVALSHA", script_sha1(), std::to_string(keys.size())};
    args.insert(args.end(), keys.begin(), keys.end());
    args.insert(args.end(), argv.begin(), argv.end());
    return args;
  }

  // With `refused`, an error reply is said there (and an empty decision
  // returned) instead of failing the test.
  RateDecision decide(const std::vector<LimitDescriptor>& limits, double cost,
                      std::string* refused = nullptr) {
    Reply r = command(script_args(limits, cost));
    if (refused != nullptr && r->type == REDIS_REPLY_ERROR) {
      *refused = std::string(r->str, r->len);
      return {};
    }
    INFO((r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string()));
    std::vector<sluice::ScriptReplyValue> values;
    if (r->type == REDIS_REPLY_STRING) {  // one token bucket: its packed reply
      REQUIRE(limits.size() == 1);
      values.push_back({true, 0, std::string_view(r->str, r->len)});
    } else {
      REQUIRE(r->type == REDIS_REPLY_ARRAY);
    }
    for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      sluice::ScriptReplyValue v;
      if (e->type == REDIS_REPLY_INTEGER) {
        v.integer = e->integer;
      } else if (e->type == REDIS_REPLY_STRING) {
        v.is_string = true;
        v.text = std::string_view(e->str, e->len);
      }
      values.push_back(v);
    }
    std::optional<RateDecision> decision = kCodec.decode(values, limits.size());
    REQUIRE(decision);
    return *decision;
  }

  // The error a decision call is answered with ("" when it is answered a decision).
  std::string decide_error(const std::vector<LimitDescriptor>& limits, double cost) {
    Reply r = command(script_args(limits, cost));
    return r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string();
  }

  // The command of one batch call.
  std::vector<std::string> batch_args(const std::vector<sluice::BatchRequest>& requests) {
    std::vector<std::string> args = {"EVALSHA", script_sha1(), std::to_string(requests.size())};
    for (const auto& request : requests) {
      args.push_back(sluice::redis_key(kKeyPrefix, *request.bucket));
    }
    const std::vector<std::string> argv = kCodec.encode_batch_args(requests);
    args.insert(args.end(), argv.begin(), argv.end());
    return args;
  }

  // A batch call's reply, one value per request (views into `r`).
  static std::vector<sluice::ScriptReplyValue> batch_values(const Reply& r) {
    INFO((r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string()));
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    std::vector<sluice::ScriptReplyValue> values;
    for (std::size_t i = 0; i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      values.push_back(
          {e->type == REDIS_REPLY_STRING, e->integer, std::string_view(e->str, e->len)});
    }
    return values;
  }

  // One batch call: each request one enforced key and its cost.
  std::vector<RateDecision> decide_batch(const std::vector<sluice::BatchRequest>& requests) {
    Reply r = command(batch_args(requests));
    auto decisions = kCodec.decode_batch(batch_values(r), requests.size());
    REQUIRE(decisions);
    return *decisions;
  }

  // One node batch call (the keys in ARGV, the first one also as the call's
  // one key): nullopt for a request the node did not decide.
  std::vector<std::optional<RateDecision>> decide_node_batch(
      const std::vector<sluice::BatchRequest>& requests) {
    std::vector<std::string> keys;
    for (const auto& request : requests) {
      keys.push_back(sluice::redis_key(kKeyPrefix, *request.bucket));
    }
    std::vector<std::string> args = {"EVALSHA", script_sha1(), "1", keys.front()};
    const std::vector<std::string> argv = kCodec.encode_node_batch_args(requests, keys);
    args.insert(args.end(), argv.begin(), argv.end());
    Reply r = command(args);
    auto decisions = kCodec.decode_node_batch(batch_values(r), requests.size());
    REQUIRE(decisions);
    return *decisions;
  }

  // The stored bucket: two little-endian doubles (tokens, timestamp_us).
  BucketState stored(const std::string& key) {
    Reply r = command({"GET", key});
    if (r->type != REDIS_REPLY_STRING) return {};
    REQUIRE(r->len == 16);
    double tokens = 0;
    double stamp = 0;
    std::memcpy(&tokens, r->str, 8);
    std::memcpy(&stamp, r->str + 8, 8);
    return BucketState{tokens, static_cast<std::int64_t>(stamp), true};
  }

  void store(const std::string& key, const BucketState& state) {
    char packed[16];
    const double stamp = static_cast<double>(state.timestamp_us);
    std::memcpy(packed, &state.tokens, 8);
    std::memcpy(packed + 8, &stamp, 8);
    REQUIRE(command({"SET", key, std::string(packed, 16)})->type == REDIS_REPLY_STATUS);
  }

  long long pttl(const std::string& key) { return command({"PTTL", key})->integer; }

  // One renew_slots.lua call for `slots`; how many were renewed.
  long long renew(const std::vector<LimitDescriptor>& slots) {
    const std::vector<std::string> keys = sluice::redis_keys(kKeyPrefix, slots);
    std::vector<std::string> args = {"EVAL", std::string(sluice::kRenewSlotsScript),
                                     std::to_string(keys.size())};
    args.insert(args.end(), keys.begin(), keys.end());
    const auto argv = kCodec.encode_renew_args(slots);
    args.insert(args.end(), argv.begin(), argv.end());
    Reply r = command(args);
    INFO((r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string()));
    REQUIRE(r->type == REDIS_REPLY_INTEGER);
    return r->integer;
  }

  // Gives `tokens` back to each of `limits` with the refund script (negative:
  // takes them, down to max_debt below empty); how many buckets it changed.
  long long refund(const std::vector<LimitDescriptor>& limits, double tokens, double max_debt = 0) {
    std::vector<sluice::BucketRefund> refunds;
    for (const auto& l : limits) refunds.push_back({l, tokens, max_debt});
    const std::vector<std::string> keys = sluice::redis_keys(kKeyPrefix, limits);
    std::vector<std::string> args = {"EVAL", std::string(sluice::kRefundLimitsScript),
                                     std::to_string(keys.size())};
    args.insert(args.end(), keys.begin(), keys.end());
    const auto argv = kCodec.encode_refund_args(refunds);
    args.insert(args.end(), argv.begin(), argv.end());
    Reply r = command(args);
    INFO((r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string()));
    REQUIRE(r->type == REDIS_REPLY_INTEGER);
    return r->integer;
  }

 private:
  redisContext* ctx_;
};

inline bool have_redis() {
  return std::filesystem::exists("/usr/bin/redis-server");
}

inline void load_script(Redis& redis) {
  Reply r = redis.command({"SCRIPT", "LOAD", std::string(sluice::kDecideLimitsScript)});
  REQUIRE(r->type == REDIS_REPLY_STRING);
  REQUIRE(std::string(r->str, r->len) == script_sha1());
}

// Whether a test case must skip (no redis-server here), said as a warning.
inline bool skip_without_redis() {
  if (have_redis()) return false;
  WARN("no /usr/bin/redis-server: skipped");
  return true;
}

// A redis-server of one test case's own, a connection to it, and the script
// loaded.
struct ScriptServer {
  sluice::test::RedisServerFixture server;
  Redis redis{server.port()};
  ScriptServer() { load_script(redis); }
};

// A small deterministic generator (the same sequence on every run).
struct Lcg {
  std::uint64_t state = 0x2545f4914f6cdd1dULL;
  std::uint32_t next(std::uint32_t bound) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::uint32_t>(state >> 33) % bound;
  }
};

// Every field of one twin decision equals the script's, bit for bit.
inline void check_equal(const RateDecision& script, const RateDecision& twin) {
  REQUIRE(script.allowed == twin.allowed);
  REQUIRE(script.limits.size() == twin.limits.size());
  for (std::size_t i = 0; i < twin.limits.size(); ++i) {
    CHECK(script.limits[i].sufficient == twin.limits[i].sufficient);
    CHECK(script.limits[i].remaining == twin.limits[i].remaining);
    CHECK(script.limits[i].seconds_to_cost == twin.limits[i].seconds_to_cost);
    CHECK(script.limits[i].seconds_to_full == twin.limits[i].seconds_to_full);
    CHECK(script.limits[i].leased == twin.limits[i].leased);
    CHECK(script.limits[i].wait_seconds == twin.limits[i].wait_seconds);
  }
  CHECK(script.delay_seconds == twin.delay_seconds);
}

// A denial the script answered between TIME t0 and t1, against the twin's
// decisions at t0 (`early`) and t1 (`late`): buckets only recover with time,
// so the twin denies at t0 too, and each value lies between its two.
inline void check_denied_between(const RateDecision& script, const RateDecision& early,
                                 const RateDecision& late) {
  REQUIRE_FALSE(early.allowed);
  for (std::size_t i = 0; i < script.limits.size(); ++i) {
    const auto& s = script.limits[i];
    const auto& e = early.limits[i];
    CHECK(s.wait_seconds == 0);
    CHECK((s.sufficient || !e.sufficient));
    CHECK(s.remaining >= e.remaining);
    CHECK(s.seconds_to_cost <= e.seconds_to_cost);
    CHECK(s.seconds_to_full <= e.seconds_to_full);
    if (!late.allowed) {
      const auto& l = late.limits[i];
      CHECK((l.sufficient || !s.sufficient));
      CHECK(s.remaining <= l.remaining);
      CHECK(s.seconds_to_cost >= l.seconds_to_cost);
      CHECK(s.seconds_to_full >= l.seconds_to_full);
    }
  }
}

// The stored sliding window: three little-endian doubles (index, current,
// previous), as a BucketState (tokens = current, timestamp_us = index).
inline BucketState stored_window(Redis& redis, const std::string& key) {
  Reply r = redis.command({"GET", key});
  if (r->type != REDIS_REPLY_STRING) return {};
  REQUIRE(r->len == 24);
  double numbers[3];
  std::memcpy(numbers, r->str, 24);
  return BucketState{numbers[1], static_cast<std::int64_t>(numbers[0]), true, numbers[2]};
}

}  // namespace sluice::test::script
