// The token-bucket codec and script text, without Redis: how a call's
// arguments are encoded, how a reply is decoded (and refused when malformed),
// and which Redis commands the script may use.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "middleware/ratelimit/algorithms/limits_codec.hpp"
#include "middleware/ratelimit/algorithms/token_bucket.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "upstream/redis/codec.hpp"
#include "upstream/redis/redis_clock.hpp"

namespace limits_codec_test {

using sluice::LimitDescriptor;
using sluice::RateDecision;

const sluice::LimitsCodec kCodec;

// A bucket of limit `limit` whose key value is `key`.
LimitDescriptor bucket(std::string limit, std::string_view key, double capacity, double rate) {
  return LimitDescriptor{std::move(limit), sluice::key_hash(key), capacity, rate};
}

std::string script_sha1() {
  return sluice::redis::script_sha1(sluice::kDecideLimitsScript);
}

std::string raw_doubles(std::initializer_list<double> values) {
  std::string out;
  for (double value : values) {
    char bytes[sizeof(double)];
    std::memcpy(bytes, &value, sizeof(double));
    out.append(bytes, sizeof(double));
  }
  return out;
}

TEST_CASE("script: one token bucket's packed reply", "[ratelimit][script]") {
  using sluice::ScriptReplyValue;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const auto decode = [](const std::string& text, std::size_t count = 1) {
    const ScriptReplyValue value{true, 0, text};
    return kCodec.decode(std::span<const ScriptReplyValue>(&value, 1), count);
  };
  // allowed + 2 * sufficient, remaining, seconds_to_cost, seconds_to_full, leased, wait
  auto d = decode(raw_doubles({3, 7, 0, 1.5, 4, 0}));
  REQUIRE(d);
  CHECK(d->allowed);
  CHECK(d->limits.size() == 1);
  CHECK(d->limits[0].sufficient);
  CHECK(d->limits[0].remaining == 7);
  CHECK(d->limits[0].seconds_to_full == 1.5);
  CHECK(d->limits[0].leased == 4);
  CHECK(d->delay_seconds == 0);
  d = decode(raw_doubles({1, -2, 0.5, 3, 0, 0.5}));  // reserved: allowed, not sufficient
  REQUIRE(d);
  CHECK(d->allowed);
  CHECK_FALSE(d->limits[0].sufficient);
  CHECK(d->delay_seconds == 0.5);
  d = decode(raw_doubles({0, 0.5, kInf, 1.25, 0, 0}));
  REQUIRE(d);
  CHECK_FALSE(d->allowed);
  CHECK(d->limits[0].seconds_to_cost == kInf);
  // Refused: sufficient without allowed, another flag, a wrong size, out-of-range
  // numbers, or this form for more than one bucket.
  CHECK_FALSE(decode(raw_doubles({2, 1, 0, 0, 0, 0})));
  CHECK_FALSE(decode(raw_doubles({0.5, 1, 0, 0, 0, 0})));
  CHECK_FALSE(decode(raw_doubles({1, 1, 0, 0, 0})));
  CHECK_FALSE(decode(raw_doubles({1, std::nan(""), 0, 0, 0, 0})));
  CHECK_FALSE(decode(raw_doubles({1, 1, 0, 0, -1, 0})));
  CHECK_FALSE(decode(raw_doubles({1, 1, 0, 0, 0, kInf})));
  CHECK_FALSE(decode(raw_doubles({3, 7, 0, 1.5, 4, 0}), 2));
}

TEST_CASE("script: a batch call's arguments and reply", "[ratelimit][script]") {
  using sluice::ScriptReplyValue;
  const LimitDescriptor a = bucket("a", "a", 10, 1);
  const LimitDescriptor b = bucket("b", "b", 5, 0.5);
  const std::vector<sluice::BatchRequest> requests = {{&a, 1}, {&b, 3}};
  const std::int64_t before = sluice::redis::server_now_us();
  const std::vector<std::string> args = kCodec.encode_batch_args(requests);
  const std::int64_t after = sluice::redis::server_now_us();
  REQUIRE(args.size() == 3);
  // Last, the call's deadline in Redis' time (the codec's default: a minute on).
  CHECK(std::stoll(args[2]) >= before + 60'000'000);
  CHECK(std::stoll(args[2]) <= after + 60'000'000);
  CHECK(args[0].empty());  // what marks a batch
  CHECK(sluice::LimitsCodec::is_batch(args));
  CHECK_FALSE(sluice::LimitsCodec::is_batch(kCodec.encode_args({&a, 1}, 1)));
  // A bucket twice (the same limit and key; not the same limit alone): "h".
  const LimitDescriptor a_again = bucket("a", "a", 10, 1);
  const LimitDescriptor other_key = bucket("a", "z", 10, 1);
  const std::vector<sluice::BatchRequest> hot = {{&a, 1}, {&b, 1}, {&a_again, 1}};
  const std::vector<sluice::BatchRequest> cold = {{&a, 1}, {&b, 1}, {&other_key, 1}};
  CHECK(kCodec.encode_batch_args(hot)[0] == "h");
  CHECK(sluice::LimitsCodec::is_batch(kCodec.encode_batch_args(hot)));
  CHECK(kCodec.encode_batch_args(cold)[0].empty());
  // One argument of seven doubles per request: what a call of the request
  // alone sends as its numbers, then its ttl (a call alone: the ttl's text).
  const auto alone = [](const LimitDescriptor& d, double cost) {
    const std::vector<std::string> one = kCodec.encode_args({&d, 1}, cost);
    return one[0] + raw_doubles({std::stod(one[1])});
  };
  CHECK(args[1] == alone(a, 1) + alone(b, 3));

  const std::string allowed = raw_doubles({3, 9, 0, 1, 0, 0});
  const std::string denied = raw_doubles({0, 0.5, 2, 9, 0, 0});
  std::vector<ScriptReplyValue> values = {{true, 0, allowed}, {true, 0, denied}};
  auto decisions = kCodec.decode_batch(values, 2);
  REQUIRE(decisions);
  CHECK((*decisions)[0].allowed);
  CHECK((*decisions)[0].limits[0].remaining == 9);
  CHECK_FALSE((*decisions)[1].allowed);
  CHECK((*decisions)[1].limits[0].seconds_to_cost == 2);
  CHECK_FALSE(kCodec.decode_batch(values, 3));  // one answer missing
  values[1] = {false, 1, {}};                   // an integer where a string belongs
  CHECK_FALSE(kCodec.decode_batch(values, 2));
  values[1] = {true, 0, denied.substr(0, 40)};  // torn
  CHECK_FALSE(kCodec.decode_batch(values, 2));
}

TEST_CASE("codec: a late batch call's admitted requests are given back, with their keys' ttls",
          "[ratelimit][script]") {
  const LimitDescriptor a = bucket("a", "a", 10, 1);  // ttl: 10 s to refill, in ms
  const LimitDescriptor b = bucket("b", "b", 5, 0.5);
  const std::vector<sluice::BatchRequest> requests = {{&a, 2}, {&b, 3}, {&a, 1}};
  const std::vector<std::string> keys = {"k:a", "k:b", "k:a"};
  const std::vector<std::string> args = kCodec.encode_batch_args(requests);
  std::vector<RateDecision> decisions(3);
  for (RateDecision& d : decisions) {
    d.allowed = true;
    d.limits.resize(1);
  }
  decisions[1].allowed = false;     // denied: took nothing
  decisions[2].limits[0].leased = 4;  // a lease comes back too
  const sluice::LimitsCodec::UndoCall undo = kCodec.undo_call(keys, args, decisions);
  CHECK(undo.requests == 2);
  REQUIRE(undo.keys == std::vector<std::string>{"k:a", "k:a"});
  REQUIRE(undo.args.size() == 3);
  // Per key: kind, units, capacity, x, y, z, max_debt; then each key's ttl.
  const std::string a_numbers = kCodec.encode_args({&a, 1}, 1)[0].substr(8);
  const auto refund = [&](double units) {
    return a_numbers.substr(0, 8) + raw_doubles({units}) + a_numbers.substr(8) + raw_doubles({0});
  };
  CHECK(undo.args[0] == refund(2) + refund(5));
  const std::string a_ttl = kCodec.encode_args({&a, 1}, 1)[1];
  CHECK(undo.args[1] == a_ttl);
  CHECK(undo.args[2] == a_ttl);
  // Shapes that do not match give nothing back.
  CHECK(kCodec.undo_call(std::span(keys).first(2), args, decisions).keys.empty());
  std::vector<std::string> torn = args;
  torn[1].pop_back();
  CHECK(kCodec.undo_call(keys, torn, decisions).keys.empty());
}

TEST_CASE("codec: a node batch carries its keys in ARGV; its undecided requests answer ''",
          "[ratelimit][script][cluster]") {
  using sluice::ScriptReplyValue;
  const LimitDescriptor a = bucket("a", "a", 10, 1);
  const LimitDescriptor b = bucket("b", "b", 5, 0.5);
  const std::vector<sluice::BatchRequest> requests = {{&a, 2}, {&b, 3}};
  const std::vector<std::string> keys = {"k:{a}", "k:{b}"};
  const std::vector<std::string> args = kCodec.encode_node_batch_args(requests, keys);
  const std::vector<std::string> plain = kCodec.encode_batch_args(requests);
  // "n", the batch's numbers, the keys, the deadline.
  REQUIRE(args.size() == 5);
  CHECK(args[0] == "n");
  CHECK(args[1] == plain[1]);
  CHECK(args[2] == keys[0]);
  CHECK(args[3] == keys[1]);
  CHECK(std::stoll(args[4]) >= std::stoll(plain[2]) - 1'000'000);
  CHECK(sluice::LimitsCodec::is_batch(args));
  CHECK(sluice::LimitsCodec::is_node_batch(args));
  CHECK_FALSE(sluice::LimitsCodec::is_node_batch(plain));
  CHECK(std::vector<std::string>(sluice::LimitsCodec::node_batch_keys(args).begin(),
                                 sluice::LimitsCodec::node_batch_keys(args).end()) == keys);
  const std::vector<sluice::BatchRequest> hot = {{&a, 1}, {&a, 1}};
  CHECK(kCodec.encode_node_batch_args(hot, std::vector<std::string>{"k:{a}", "k:{a}"})[0] == "nh");

  const std::string allowed = raw_doubles({3, 9, 0, 1, 0, 0});
  std::vector<ScriptReplyValue> values = {{true, 0, allowed}, {true, 0, ""}};
  const auto decisions = kCodec.decode_node_batch(values, 2);
  REQUIRE(decisions);
  REQUIRE((*decisions)[0]);
  CHECK((*decisions)[0]->allowed);
  CHECK((*decisions)[0]->limits[0].remaining == 9);
  CHECK_FALSE((*decisions)[1]);  // the node does not serve b's slot
  CHECK_FALSE(kCodec.decode_batch(values, 2));  // '' is no plain batch's answer
  values[1] = {false, 0, {}};
  CHECK_FALSE(kCodec.decode_node_batch(values, 2));

  // Late: the admitted requests come back on the keys the ARGV named (KEYS,
  // one of them, only routed the call), a refund call per slot.
  std::vector<RateDecision> late(2);
  for (RateDecision& d : late) {
    d.allowed = true;
    d.limits.resize(1);
  }
  const std::vector<std::string> routing = {keys[1]};
  const sluice::LimitsCodec::UndoCall undo = kCodec.undo_call(routing, args, late);
  CHECK(undo.requests == 2);
  REQUIRE(undo.keys == keys);
  const sluice::LimitsCodec::UndoCall whole = kCodec.undo_call(keys, plain, late);
  CHECK(undo.args == whole.args);
  const std::vector<std::size_t> second = {1};
  const sluice::LimitsCodec::UndoCall part = sluice::LimitsCodec::undo_part(undo, second);
  CHECK(part.keys == std::vector<std::string>{keys[1]});
  REQUIRE(part.args.size() == 2);
  CHECK(part.args[0] == undo.args[0].substr(56));
  CHECK(part.args[1] == undo.args[2]);
}

TEST_CASE("script: reply parsing and call arguments", "[ratelimit][script]") {
  using sluice::ScriptReplyValue;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::string numbers = raw_doubles({0.5, kInf, 1.25, 0, 0});
  std::vector<ScriptReplyValue> values = {{false, 0, {}}, {false, 0, {}}, {true, 0, numbers}};
  auto d = kCodec.decode(values, 1);
  REQUIRE(d);
  CHECK_FALSE(d->allowed);
  CHECK_FALSE(d->limits[0].sufficient);
  CHECK(d->limits[0].remaining == 0.5);
  CHECK(d->limits[0].seconds_to_cost == kInf);
  CHECK(d->limits[0].seconds_to_full == 1.25);
  CHECK_FALSE(kCodec.decode(values, 2));
  CHECK_FALSE(kCodec.decode(values, 0));

  const std::string short_numbers = numbers.substr(0, 32);
  values[2].text = short_numbers;
  CHECK_FALSE(kCodec.decode(values, 1));
  const std::string nan_numbers = raw_doubles({std::nan(""), 0, 0, 0, 0});
  values[2].text = nan_numbers;
  CHECK_FALSE(kCodec.decode(values, 1));
  const std::string negative_lease = raw_doubles({1, 0, 0, -1, 0});
  values[2].text = negative_lease;
  CHECK_FALSE(kCodec.decode(values, 1));
  const std::string negative_wait = raw_doubles({1, 0, 0, 0, -1});
  values[2].text = negative_wait;
  CHECK_FALSE(kCodec.decode(values, 1));
  const std::string endless_wait = raw_doubles({1, 0, 0, 0, kInf});
  values[2].text = endless_wait;
  CHECK_FALSE(kCodec.decode(values, 1));
  const std::string leased = raw_doubles({7, 0, 1, 12, 0});
  values[2].text = leased;
  d = kCodec.decode(values, 1);
  REQUIRE(d);
  CHECK(d->limits[0].leased == 12);
  CHECK(d->limits[0].remaining == 7);
  CHECK(d->delay_seconds == 0);
  const std::string waiting = raw_doubles({-1, 1.5, 2, 0, 0.25});
  values[2].text = waiting;
  d = kCodec.decode(values, 1);
  REQUIRE(d);
  CHECK(d->limits[0].wait_seconds == 0.25);
  CHECK(d->delay_seconds == 0.25);
  values[2].text = leased;
  values[2] = {false, 1, {}};  // an integer where the numbers belong
  CHECK_FALSE(kCodec.decode(values, 1));
  values[2] = {true, 0, numbers};
  values[1] = {true, 0, "1"};  // a string where a flag belongs
  CHECK_FALSE(kCodec.decode(values, 1));
  values[1] = {false, 1, {}};
  values[0].integer = 2;
  CHECK_FALSE(kCodec.decode(values, 1));
  values[0].integer = 1;
  d = kCodec.decode(values, 1);
  REQUIRE(d);
  CHECK(d->allowed);
  CHECK(d->limits[0].sufficient);

  const std::vector<ScriptReplyValue> no_limits = {{false, 1, {}}};
  d = kCodec.decode(no_limits, 0);
  REQUIRE(d);
  CHECK(d->allowed);
  CHECK(d->limits.empty());

  std::vector<LimitDescriptor> limits = {bucket("a", "a", 50, 0.1), bucket("b", "b", 3, 1.0 / 3)};
  limits[1].lease_want = 20;
  limits[1].max_wait_seconds = 0.25;
  limits[0].shadow = true;
  sluice::LimitsCodec codec;
  codec.set_deadline_after(std::chrono::milliseconds(40));
  const std::int64_t before = sluice::redis::server_now_us();
  const auto args = codec.encode_args(limits, 1.5);
  const std::int64_t after = sluice::redis::server_now_us();
  REQUIRE(args.size() == 4);
  CHECK(std::stoll(args[3]) >= before + 40'000);
  CHECK(std::stoll(args[3]) <= after + 40'000);
  CHECK(args[0] == raw_doubles({1.5, 1, 50, 0.1, 0, 0, 0, 3, 1.0 / 3, 20, 0.25}));
  CHECK(args[1] == "501000");
  CHECK(args[2] == std::to_string(sluice::bucket_ttl_ms(3, 1.0 / 3)));
  CHECK(kCodec.encode_args({}, 2).front() == raw_doubles({2}));
  CHECK(kCodec.encode_args({}, 2).size() == 2);

  const std::vector<sluice::BucketRefund> refunds = {{limits[0], 4}, {limits[1], -0.5, 7}};
  const auto refund_args = kCodec.encode_refund_args(refunds);
  REQUIRE(refund_args.size() == 3);
  // Per key: kind, units (negative: a debit), capacity, x, y, z, max_debt.
  CHECK(refund_args[0] == raw_doubles({1, 4, 50, 0.1, 0, 0, 0, 0, -0.5, 3, 1.0 / 3, 20, 0.25, 7}));
  CHECK(refund_args[1] == "501000");
  CHECK(refund_args[2] == std::to_string(sluice::bucket_ttl_ms(3, 1.0 / 3)));
  CHECK(script_sha1().size() == 40);
}

TEST_CASE("script: a sliding log's request number goes as y to its decision and its refund",
          "[ratelimit][script]") {
  LimitDescriptor log = bucket("l", "l", 20, 0);
  log.algorithm = sluice::LimitAlgorithm::kSlidingLog;
  log.window_seconds = 60;
  log.slot = 4096;
  // Per key: kind, capacity, x (the window in seconds), y (the number), z.
  CHECK(kCodec.encode_args({&log, 1}, 2)[0] == raw_doubles({2, 6, 20, 60, 4096, 0}));
  const std::vector<sluice::BatchRequest> batch = {{&log, 2}};
  CHECK(kCodec.encode_batch_args(batch)[1].substr(0, 48) == raw_doubles({2, 6, 20, 60, 4096, 0}));
  const std::vector<sluice::BucketRefund> refunds = {{log, 1.5, 3}};
  CHECK(kCodec.encode_refund_args(refunds)[0] == raw_doubles({6, 1.5, 20, 60, 4096, 0, 3}));
}

TEST_CASE("script: only TIME, MGET and SET reach Redis, and the sorted-set commands of a log",
          "[ratelimit][script]") {
  const std::string_view script = sluice::kDecideLimitsScript;
  // redis.call and redis.pcall are bound once to the locals `call` and `try`;
  // nothing else of redis.* is used.
  std::size_t redis_uses = 0;
  for (std::size_t at = script.find("redis."); at != std::string_view::npos;
       at = script.find("redis.", at + 1)) {
    ++redis_uses;
    CHECK((script.substr(at, 11) == "redis.call," || script.substr(at, 12) == "redis.pcall,"));
  }
  CHECK(redis_uses == 2);
  // The sections kept in sorted sets (sliding log, concurrency), from the
  // first's heading to the heading after the second.
  const std::size_t log_start = script.find("-- ---- sliding log");
  const std::size_t log_end = script.find("-- ----", script.find("-- ---- concurrency") + 1);
  REQUIRE(log_start != std::string_view::npos);
  REQUIRE(log_end != std::string_view::npos);
  int calls = 0;
  int log_calls = 0;
  // Both `call('` and `try('` end in "('", four characters after their start.
  const auto next_command = [&](std::size_t from) {
    return std::min(script.find("call('", from), script.find("try('", from));
  };
  for (std::size_t at = next_command(0); at != std::string_view::npos; at = next_command(at + 1)) {
    const std::size_t name = script.find("('", at) + 2;
    const std::string command(script.substr(name, script.find('\'', name) - name));
    CAPTURE(command);
    if (at > log_start && at < log_end) {
      // What a user needs for sliding_log and concurrency limits besides
      // (docs/operations.md).
      CHECK((command == "DEL" || command == "ZREMRANGEBYSCORE" || command == "ZCARD" ||
             command == "ZCOUNT" || command == "ZADD" || command == "PEXPIRE" ||
             command == "ZRANGE"));
      ++log_calls;
      continue;
    }
    // What a restricted ACL user is granted (tests/integration/test_redis_failure.py).
    CHECK((command == "TIME" || command == "MGET" || command == "SET"));
    ++calls;
  }
  // TIME; one SET in each other algorithm's section (token bucket, sliding
  // window, quota); MGET of one key, MGET of several, the MGET a node batch
  // first reads each key with (a key of another node fails it), the MGET of
  // every key of a batch without a repeated key; the SET of the values a
  // batch with a repeated key kept.
  CHECK(calls == 9);
  CHECK(log_calls == 7 + 5);
}

}  // namespace limits_codec_test
