// RedisRateLimiter driven through a fake redis::Client completed by hand: the
// script call it sends, error mapping, the circuit breaker (opening after N
// failures, the half-open trial), the one truth of the open state, the
// reload switch to a new client, and the fleet heartbeat's call.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/algorithms/limits_codec.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/redis/bucket_admin.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "support/fake_redis_client.hpp"
#include "support/io_loop.hpp"
#include "support/script_replies.hpp"
#include "upstream/redis/codec.hpp"
#include "upstream/redis/redis_clock.hpp"

namespace redis_rate_limiter_fake_test {

using namespace std::chrono_literals;
using namespace sluice;
using sluice::test::FakeRedisClient;
using sluice::test::FakeRedisClients;
using sluice::test::integer_reply;
using sluice::test::Loop;
using sluice::test::one_bucket_array_reply;
using sluice::test::one_bucket_reply;
using sluice::test::without_deadline;

struct Outcome {
  std::error_code ec;
  RateDecision decision;
};

struct Harness {
  Loop loop;
  MetricsShard metrics;
  RedisConfig config;
  FakeRedisClients clients{loop.io.get_executor(), {}};
  std::optional<RedisRateLimiter> limiter;
  std::vector<std::optional<Outcome>> outcomes;

  Harness() {
    config.key_prefix = "sluice:";
    config.circuit_breaker.failures = 2;
    config.circuit_breaker.open = 1000ms;  // the checks while open take well under it
    auto make_client = clients.factory();
    limiter.emplace(loop.io.get_executor(), config, metrics, make_client(redis_options(config)),
                    make_client);
  }
  ~Harness() {
    // Unfired completions hold the limiter: drop them first.
    for (FakeRedisClient* client : clients.made) client->calls.clear();
    limiter->close();
  }

  FakeRedisClient& client(std::size_t i = 0) { return *clients.made.at(i); }

  // A reload to a Redis Cluster whose client is ready at once: the limiter
  // sends its next call there (a client's routing is decided when it takes
  // over). Returns the new client.
  FakeRedisClient& reload_to_cluster() {
    config.topology = RedisConfig::Topology::kCluster;
    limiter->reconfigure(config);
    FakeRedisClient& cluster = *clients.made.back();
    cluster.by_slot = true;
    cluster.set_state(redis::State::kReady);
    return cluster;
  }

  // Starts a decision for one bucket and lets the loop send it (one-bucket
  // decisions go out together at the end of a turn); returns its index in
  // `outcomes`.
  std::size_t decide() {
    const std::size_t index = queue();
    loop.io.poll();
    return index;
  }
  // The same without running the loop: decisions queued in one turn.
  std::size_t queue(std::string_view key = "abc", double cost = 1) {
    const std::size_t index = outcomes.size();
    outcomes.emplace_back();
    LimitDescriptor d{"per_ip", key_hash(key), 10, 1};
    limiter->decide({d}, cost, [this, index](std::error_code ec, RateDecision decision) {
      outcomes[index] = Outcome{ec, std::move(decision)};
    });
    return index;
  }
  Outcome wait(std::size_t index) {
    REQUIRE(loop.run_until([&] { return outcomes[index].has_value(); }));
    return *outcomes[index];
  }
  double gauge(const char* name, const std::string& labels = "") {
    limiter->export_metrics();
    MetricsSnapshot snapshot;
    metrics.merge_into(snapshot);
    return snapshot.value(name, labels);
  }
  // Fails decisions until the breaker opens.
  void open_breaker() {
    for (unsigned i = 0; i < config.circuit_breaker.failures; ++i) {
      const auto index = decide();
      client().complete(client().calls.size() - 1, redis::Error::kTimeout);
      REQUIRE(wait(index).ec == redis::Error::kTimeout);
    }
    REQUIRE(limiter->circuit_open());
  }
};

// The scripts loaded on every connection: decision, refund, fleet heartbeat,
// the admin API's bucket read and reset, and the renewal of concurrency slots.
std::vector<std::string> every_script() {
  return {redis::script_sha1(kDecideLimitsScript),   redis::script_sha1(kRefundLimitsScript),
          redis::script_sha1(kFleetHeartbeatScript), redis::script_sha1(kBucketReadScript),
          redis::script_sha1(kBucketResetScript),    redis::script_sha1(kRenewSlotsScript)};
}

TEST_CASE("fake redis: one EVALSHA with the prefixed keys and the codec's ARGV",
          "[ratelimit][limiter]") {
  Harness h;
  h.client().set_state(redis::State::kReady);
  CHECK(h.client().loaded == every_script());
  const std::int64_t before = redis::server_now_us();
  const auto index = h.decide();
  const std::int64_t after = redis::server_now_us();
  REQUIRE(h.client().calls.size() == 1);
  // The call's deadline: four fifths of the timeout (50 ms) from now, in Redis' time.
  CHECK(std::stoll(h.client().calls[0].args.back()) >= before + 40'000);
  CHECK(std::stoll(h.client().calls[0].args.back()) <= after + 40'000);
  const auto& call = h.client().calls[0];
  CHECK(call.script);
  CHECK(call.sha1 == redis::script_sha1(kDecideLimitsScript));
  CHECK(call.keys == std::vector<std::string>{"sluice:per_ip:ba7816bf8f01cfea414140de5dae2223"});
  const LimitDescriptor d{"per_ip", key_hash("abc"), 10, 1};
  CHECK(without_deadline(call.args) == without_deadline(LimitsCodec{}.encode_args({&d, 1}, 1)));
  h.loop.io.poll();
  CHECK_FALSE(h.outcomes[index]);  // nothing until the client completes
  h.client().complete(0, {}, one_bucket_reply(true, 9));
  const auto outcome = h.wait(index);
  CHECK_FALSE(outcome.ec);
  CHECK(outcome.decision.allowed);
  REQUIRE(outcome.decision.limits.size() == 1);
  CHECK(outcome.decision.limits[0].remaining == 9);
  CHECK(outcome.decision.limits[0].sufficient);

  // The general form of the reply decides the same; a packed string of another
  // size is a protocol error, never a decision.
  const auto array = h.decide();
  h.client().complete(1, {}, one_bucket_array_reply(false, 0.5));
  const auto denied = h.wait(array);
  CHECK_FALSE(denied.ec);
  CHECK_FALSE(denied.decision.allowed);
  CHECK(denied.decision.limits[0].remaining == 0.5);
  const auto torn = h.decide();
  redis::Reply short_reply = one_bucket_reply(true, 9);
  short_reply.str.resize(40);
  h.client().complete(2, {}, short_reply);
  CHECK(h.wait(torn).ec == LimiterError::kBadReply);
}

TEST_CASE("fake redis: errors map to limiter errors and metric kinds", "[ratelimit][limiter]") {
  Harness h;
  h.config.circuit_breaker.failures = 100;
  h.limiter->reconfigure(h.config);
  SECTION("a reply of the wrong shape is kBadReply, counted as protocol") {
    const auto index = h.decide();
    h.client().complete(0, {}, integer_reply(1));
    CHECK(h.wait(index).ec == LimiterError::kBadReply);
    CHECK(h.gauge("sluice_redis_errors_total", "kind=\"protocol\"") == 1);
  }
  SECTION("a timeout passes through, counted as timeout") {
    const auto index = h.decide();
    h.client().complete(0, redis::Error::kTimeout);
    CHECK(h.wait(index).ec == redis::Error::kTimeout);
    CHECK(h.gauge("sluice_redis_errors_total", "kind=\"timeout\"") == 1);
  }
  SECTION("a connection that is down is counted as connect") {
    const auto index = h.decide();
    h.client().complete(0, redis::Error::kNotConnected);
    CHECK(h.wait(index).ec == redis::Error::kNotConnected);
    CHECK(h.gauge("sluice_redis_errors_total", "kind=\"connect\"") == 1);
  }
  SECTION("NOSCRIPT that survived the client's own EVAL retry is counted as noscript") {
    const auto index = h.decide();
    h.client().complete(0, redis::Error::kNoScript);
    CHECK(h.wait(index).ec == redis::Error::kNoScript);
    CHECK(h.gauge("sluice_redis_errors_total", "kind=\"noscript\"") == 1);
  }
  CHECK_FALSE(h.limiter->circuit_open());
}

TEST_CASE("fake redis: the breaker opens after N failures and a PING closes it",
          "[ratelimit][limiter][breaker]") {
  Harness h;
  h.client().set_state(redis::State::kReady);
  h.open_breaker();
  // /readyz and the gauge read the same state.
  CHECK(h.gauge("sluice_redis_circuit_open") == 1);
  // Refused without touching the client.
  const std::size_t calls = h.client().calls.size();
  const auto refused = h.decide();
  CHECK(h.wait(refused).ec == LimiterError::kCircuitOpen);
  CHECK(h.client().calls.size() == calls);
  // After the open period the limiter takes the half-open trial itself.
  REQUIRE(h.loop.run_until([&] { return h.client().calls.size() == calls + 1; }, 5000ms));
  CHECK(h.client().calls.back().args == std::vector<std::string>{"PING"});
  CHECK(h.limiter->circuit_open());
  // While the trial is in flight, decisions are refused.
  const auto during = h.decide();
  CHECK(h.wait(during).ec == LimiterError::kCircuitOpen);
  SECTION("a failed trial re-opens the breaker") {
    h.client().complete(calls, redis::Error::kTimeout);
    h.loop.run_until([] { return false; }, 10ms);
    CHECK(h.limiter->circuit_open());
    CHECK(h.gauge("sluice_redis_circuit_open") == 1);
  }
  SECTION("an answered trial closes it") {
    h.client().complete(calls, {}, integer_reply(1));
    REQUIRE(h.loop.run_until([&] { return !h.limiter->circuit_open(); }));
    CHECK(h.gauge("sluice_redis_circuit_open") == 0);
    const auto next = h.decide();
    REQUIRE(h.client().calls.size() == calls + 2);
    h.client().complete(calls + 1, {}, one_bucket_reply(true, 5));
    CHECK_FALSE(h.wait(next).ec);
  }
}

TEST_CASE("fake redis: a reload with new Redis settings replaces the client",
          "[ratelimit][limiter][reload]") {
  Harness h;
  h.client().set_state(redis::State::kReady);
  SECTION("unchanged settings keep the client") {
    h.config.circuit_breaker.failures = 7;  // not a connection setting
    h.limiter->reconfigure(h.config);
    CHECK(h.clients.made.size() == 1);
  }
  SECTION("a new address connects a new client, which takes over once ready") {
    h.config.port = 6390;
    h.limiter->reconfigure(h.config);
    REQUIRE(h.clients.made.size() == 2);
    FakeRedisClient& next = h.client(1);
    CHECK(next.options().port == 6390);
    CHECK(next.connects == 1);
    CHECK(next.loaded == every_script());
    // Not ready yet: decisions stay on the current connection.
    h.decide();
    CHECK(h.client(0).calls.size() == 1);
    CHECK(next.calls.empty());
    next.finish_connect({});
    h.loop.run_until([] { return false; }, 10ms);
    h.decide();
    CHECK(next.calls.size() == 1);
    CHECK(h.limiter->redis_ready());
    // The same settings again: no third client.
    h.limiter->reconfigure(h.config);
    CHECK(h.clients.made.size() == 2);
    // The old client is closed once its decisions must have finished.
    REQUIRE(h.loop.run_until([&] { return h.client(0).closed; }, 2000ms));
  }
}

TEST_CASE("fake redis: the fleet heartbeat is one script call on the fleet key",
          "[ratelimit][limiter]") {
  Harness h;
  h.client().set_state(redis::State::kReady);
  std::vector<std::pair<std::error_code, long long>> answers;
  const auto record = [&answers](std::error_code ec, long long live, std::string_view) {
    answers.emplace_back(ec, live);
  };
  h.limiter->fleet_heartbeat("0123abcd", 3000ms, false, record);
  h.limiter->fleet_heartbeat("0123abcd", 3000ms, true, record);
  REQUIRE(h.client().calls.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& call = h.client().calls[i];
    CHECK(call.sha1 == redis::script_sha1(kFleetHeartbeatScript));
    CHECK(call.keys == std::vector<std::string>{"sluice:fleet"});
    CHECK(call.args == std::vector<std::string>{"0123abcd", "3000", i == 0 ? "0" : "1"});
  }
  h.client().complete(0, {}, integer_reply(3));
  h.client().complete(1, redis::Error::kTimeout);
  REQUIRE(h.loop.run_until([&] { return answers.size() == 2; }));
  CHECK(answers[0] == std::pair<std::error_code, long long>{{}, 3});
  CHECK(answers[1].first == redis::Error::kTimeout);
  // Not a decision: the breaker and the error counters do not see it.
  CHECK(h.gauge("sluice_redis_errors_total", "kind=\"timeout\"") == 0);
  CHECK_FALSE(h.limiter->circuit_open());
}

TEST_CASE(
    "fake redis: a bucket is read and reset by one script call on its key, tagged on a "
    "cluster",
    "[ratelimit][limiter][admin]") {
  Harness h;
  h.client().set_state(redis::State::kReady);
  const LimitDescriptor bucket{"per_ip", key_hash("abc"), 10, 2};
  const std::string key = "sluice:" + bucket_name(bucket);

  std::optional<std::pair<std::error_code, BucketView>> read;
  h.limiter->inspect(bucket, [&](std::error_code ec, BucketView view) { read = {ec, view}; });
  REQUIRE(h.client().calls.size() == 1);
  CHECK(h.client().calls[0].sha1 == redis::script_sha1(kBucketReadScript));
  CHECK(h.client().calls[0].keys == std::vector<std::string>{key});
  redis::Reply reply;
  reply.type = redis::Reply::Type::kArray;
  for (const char* part : {"1700000000", "0", ""}) {
    redis::Reply element;
    element.type = redis::Reply::Type::kString;
    element.str = part;
    reply.elements.push_back(element);
  }
  h.client().complete(0, {}, reply);
  REQUIRE(h.loop.run_until([&] { return read.has_value(); }));
  CHECK_FALSE(read->first);
  CHECK(read->second.tokens == 10);
  CHECK_FALSE(read->second.exists);

  // A reply of another shape is a protocol error, not a full bucket.
  read.reset();
  h.limiter->inspect(bucket, [&](std::error_code ec, BucketView view) { read = {ec, view}; });
  h.client().complete(1, {}, integer_reply(1));
  REQUIRE(h.loop.run_until([&] { return read.has_value(); }));
  CHECK(read->first == make_error_code(LimiterError::kBadReply));

  FakeRedisClient& cluster = h.reload_to_cluster();
  std::optional<std::error_code> reset;
  h.limiter->reset(bucket, [&](std::error_code ec) { reset = ec; });
  REQUIRE(h.client().calls.size() == 2);  // nothing more on the first client
  REQUIRE(cluster.calls.size() == 1);
  CHECK(cluster.calls[0].sha1 == redis::script_sha1(kBucketResetScript));
  CHECK(cluster.calls[0].keys ==
        std::vector<std::string>{"sluice:per_ip:{" + bucket_name(bucket).substr(7) + "}"});
  cluster.complete(0, redis::Error::kTimeout);
  REQUIRE(h.loop.run_until([&] { return reset.has_value(); }));
  CHECK(*reset == redis::Error::kTimeout);
}

TEST_CASE("fake redis: one-bucket decisions of one turn go out as one call",
          "[ratelimit][limiter]") {
  Harness h;
  h.client().set_state(redis::State::kReady);
  const auto first = h.queue("abc", 1);
  const auto second = h.queue("def", 2);
  const auto third = h.queue("abc", 1);
  CHECK(h.client().calls.empty());  // nothing before the turn ends
  h.loop.io.poll();
  REQUIRE(h.client().calls.size() == 1);
  const auto& call = h.client().calls[0];
  CHECK(call.sha1 == redis::script_sha1(kDecideLimitsScript));
  const LimitDescriptor abc{"per_ip", key_hash("abc"), 10, 1};
  const LimitDescriptor def{"per_ip", key_hash("def"), 10, 1};
  CHECK(call.keys == std::vector<std::string>{"sluice:" + bucket_name(abc),
                                              "sluice:" + bucket_name(def),
                                              "sluice:" + bucket_name(abc)});
  const std::vector<BatchRequest> requests = {{&abc, 1}, {&def, 2}, {&abc, 1}};
  CHECK(without_deadline(call.args) == without_deadline(LimitsCodec{}.encode_batch_args(requests)));

  redis::Reply reply;
  reply.type = redis::Reply::Type::kArray;
  reply.elements = {one_bucket_reply(true, 9), one_bucket_reply(true, 8),
                    one_bucket_reply(false, 0.5)};
  h.client().complete(0, {}, reply);
  CHECK(h.wait(first).decision.limits[0].remaining == 9);
  CHECK(h.wait(second).decision.limits[0].remaining == 8);
  CHECK_FALSE(h.wait(third).decision.allowed);

  SECTION("an error is every request's") {
    const auto a = h.queue("abc");
    const auto b = h.queue("def");
    h.loop.io.poll();
    REQUIRE(h.client().calls.size() == 2);
    h.client().complete(1, redis::Error::kTimeout);
    CHECK(h.wait(a).ec == redis::Error::kTimeout);
    CHECK(h.wait(b).ec == redis::Error::kTimeout);
  }
  SECTION("a reply with an answer missing is a protocol error for each") {
    const auto a = h.queue("abc");
    const auto b = h.queue("def");
    h.loop.io.poll();
    redis::Reply short_reply;
    short_reply.type = redis::Reply::Type::kArray;
    short_reply.elements = {one_bucket_reply(true, 9)};
    h.client().complete(1, {}, short_reply);
    CHECK(h.wait(a).ec == LimiterError::kBadReply);
    CHECK(h.wait(b).ec == LimiterError::kBadReply);
  }
  SECTION("a client that routes by slot by the end of the turn gets one call each") {
    const auto a = h.queue("abc");
    const auto b = h.queue("def");
    FakeRedisClient& cluster = h.reload_to_cluster();
    h.loop.io.poll();
    REQUIRE(h.client().calls.size() == 1);  // nothing more on the first client
    REQUIRE(cluster.calls.size() == 2);
    CHECK(cluster.calls[0].keys ==
          std::vector<std::string>{"sluice:per_ip:{" + bucket_name(abc).substr(7) + "}"});
    CHECK(cluster.calls[1].keys ==
          std::vector<std::string>{"sluice:per_ip:{" + bucket_name(def).substr(7) + "}"});
    cluster.complete(0, {}, one_bucket_reply(true, 6));
    cluster.complete(1, {}, one_bucket_reply(true, 5));
    CHECK(h.wait(a).decision.limits[0].remaining == 6);
    CHECK(h.wait(b).decision.limits[0].remaining == 5);
  }
  SECTION("a decision of several buckets is its own call") {
    const LimitDescriptor g{"global", key_hash("g"), 100, 10};
    std::optional<std::error_code> several;
    h.limiter->decide({abc, g}, 1, [&](std::error_code ec, RateDecision) { several = ec; });
    const auto a = h.queue("abc");
    h.loop.io.poll();
    REQUIRE(h.client().calls.size() == 3);
    CHECK(h.client().calls[1].keys.size() == 2);
    CHECK(h.client().calls[2].keys.size() == 1);  // a batch of one: the usual call
    CHECK(without_deadline(h.client().calls[2].args) ==
          without_deadline(LimitsCodec{}.encode_args({&abc, 1}, 1)));
    h.client().complete(2, {}, one_bucket_reply(true, 7));
    CHECK(h.wait(a).decision.limits[0].remaining == 7);
  }
  SECTION("an enforced sliding window joins the batch; a shadow bucket is its own call") {
    LimitDescriptor w{"per_key", key_hash("w"), 5, 0};
    w.algorithm = LimitAlgorithm::kSlidingWindow;
    w.window_seconds = 60;
    LimitDescriptor shadow = def;
    shadow.shadow = true;
    std::optional<RateDecision> windowed;
    std::optional<std::error_code> shadowed;
    h.limiter->decide({w}, 1, [&](std::error_code, RateDecision d) { windowed = std::move(d); });
    h.limiter->decide({shadow}, 1, [&](std::error_code ec, RateDecision) { shadowed = ec; });
    const auto a = h.queue("abc");
    REQUIRE(h.client().calls.size() == 2);  // the shadow bucket went at once
    CHECK(without_deadline(h.client().calls[1].args) ==
          without_deadline(LimitsCodec{}.encode_args({&shadow, 1}, 1)));
    h.loop.io.poll();
    REQUIRE(h.client().calls.size() == 3);
    const std::vector<BatchRequest> batched = {{&w, 1}, {&abc, 1}};
    CHECK(without_deadline(h.client().calls[2].args) ==
          without_deadline(LimitsCodec{}.encode_batch_args(batched)));
    redis::Reply both;
    both.type = redis::Reply::Type::kArray;
    both.elements = {one_bucket_reply(true, 4), one_bucket_reply(true, 7)};
    h.client().complete(2, {}, both);
    CHECK(h.wait(a).decision.limits[0].remaining == 7);
    REQUIRE(h.loop.run_until([&] { return windowed.has_value(); }));
    CHECK(windowed->allowed);
    CHECK(windowed->limits[0].remaining == 4);
    h.client().complete(1, {}, one_bucket_reply(true, 9));
    REQUIRE(h.loop.run_until([&] { return shadowed.has_value(); }));
    CHECK_FALSE(*shadowed);
  }
}

TEST_CASE(
    "fake redis: on one Redis a turn's slots go back as pipelined ZREMs, other refunds in one "
    "script call",
    "[ratelimit][limiter][concurrency]") {
  Harness h;
  h.client().set_state(redis::State::kReady);
  LimitDescriptor slot{"inflight", key_hash("abc"), 4, 0};
  slot.algorithm = LimitAlgorithm::kConcurrency;
  slot.lease_ms = 30000;
  slot.slot = 4096;
  LimitDescriptor other_slot = slot;
  other_slot.slot = 4097;
  const LimitDescriptor tokens{"per_ip", key_hash("abc"), 10, 1};
  std::vector<std::error_code> heard;
  h.limiter->refund({{slot, 1}, {tokens, 2}}, [&](std::error_code ec) { heard.push_back(ec); });
  h.limiter->refund({{other_slot, 1}}, [&](std::error_code ec) { heard.push_back(ec); });
  CHECK(h.client().calls.empty());  // nothing before the turn ends
  h.loop.io.poll();
  REQUIRE(h.client().calls.size() == 3);
  const std::string slot_key = "sluice:" + bucket_name(slot);
  CHECK_FALSE(h.client().calls[0].script);
  CHECK(h.client().calls[0].args == std::vector<std::string>{"ZREM", slot_key, "4096"});
  CHECK(h.client().calls[1].args == std::vector<std::string>{"ZREM", slot_key, "4097"});
  CHECK(h.client().calls[2].sha1 == redis::script_sha1(kRefundLimitsScript));
  CHECK(h.client().calls[2].keys == std::vector<std::string>{"sluice:" + bucket_name(tokens)});

  // A value of another shape under the key: no slot to give back, no error.
  redis::Reply wrong_type;
  wrong_type.type = redis::Reply::Type::kError;
  wrong_type.str = "WRONGTYPE Operation against a key holding the wrong kind of value";
  h.client().complete(0, {}, integer_reply(1));
  h.client().complete(1, redis::Error::kServer, wrong_type);
  h.loop.io.poll();
  CHECK(heard.empty());  // each caller hears once every call has answered
  h.client().complete(2, redis::Error::kTimeout);
  REQUIRE(h.loop.run_until([&] { return heard.size() == 2; }));
  CHECK(heard[0] == redis::Error::kTimeout);
  CHECK(heard[1] == redis::Error::kTimeout);
  CHECK(h.gauge("sluice_ratelimit_refunds_total", "result=\"ok\"") == 2);
  CHECK(h.gauge("sluice_ratelimit_refunds_total", "result=\"error\"") == 1);
}

}  // namespace redis_rate_limiter_fake_test
