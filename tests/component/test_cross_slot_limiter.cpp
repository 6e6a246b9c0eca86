// RedisRateLimiter on a cluster client (a fake that routes by slot, completed
// by hand): buckets in two slots go out as two script calls at once, a denial
// in one slot refunds the other at once (even when nobody waits for the
// answer any more), the breaker stays out of it, and keys carry hash tags.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/algorithms/limits_codec.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "support/fake_redis_client.hpp"
#include "support/io_loop.hpp"
#include "support/script_replies.hpp"
#include "upstream/redis/cluster/slot.hpp"
#include "upstream/redis/codec.hpp"

namespace cross_slot_limiter_test {

using namespace sluice;
using sluice::test::FakeRedisClient;
using sluice::test::FakeRedisClients;
using sluice::test::integer_reply;
using sluice::test::Loop;
using sluice::test::one_bucket_reply;
using sluice::test::without_deadline;

struct Outcome {
  std::error_code ec;
  RateDecision decision;
};

struct ClusterHarness {
  Loop loop;
  MetricsShard metrics;
  RedisConfig config;
  FakeRedisClients clients{loop.io.get_executor(), {}};
  std::optional<RedisRateLimiter> limiter;
  std::vector<LimitDescriptor> descriptors{{"per_key", key_hash("alice"), 10, 1},
                                           {"global", key_hash("everyone"), 100, 10}};
  const std::string decide_sha = redis::script_sha1(kDecideLimitsScript);
  const std::string refund_sha = redis::script_sha1(kRefundLimitsScript);

  ClusterHarness() {
    config.key_prefix = "s:";
    config.circuit_breaker.failures = 1;
    auto make_client = [this](redis::Options options) {
      auto client = clients.factory()(std::move(options));
      static_cast<FakeRedisClient&>(*client).by_slot = true;
      return client;
    };
    limiter.emplace(loop.io.get_executor(), config, metrics, make_client(redis_options(config)),
                    make_client);
  }
  ~ClusterHarness() {
    for (FakeRedisClient* client : clients.made) client->calls.clear();
    limiter->close();
  }
  FakeRedisClient& client() { return *clients.made.at(0); }

  std::optional<Outcome> decide(std::vector<LimitDescriptor> ds) {
    std::optional<Outcome> out;
    limiter->decide(ds, 1, [&out](std::error_code ec, RateDecision d) { out = Outcome{ec, d}; });
    return out;
  }
  double counter(const char* name, const std::string& labels) {
    limiter->export_metrics();
    MetricsSnapshot snapshot;
    metrics.merge_into(snapshot);
    return snapshot.value(name, labels);
  }
};

TEST_CASE("cluster limiter: buckets of one value share a slot and one call, with hash tags",
          "[ratelimit][cluster]") {
  ClusterHarness h;
  const std::vector<LimitDescriptor> same{{"per_key", key_hash("alice"), 10, 1},
                                          {"per_key_burst", key_hash("alice"), 5, 5}};
  std::optional<Outcome> out;
  h.limiter->decide(same, 1, [&out](std::error_code ec, RateDecision d) { out = Outcome{ec, d}; });
  REQUIRE(h.client().calls.size() == 1);
  const auto& call = h.client().calls[0];
  CHECK(call.sha1 == h.decide_sha);
  CHECK(call.keys == redis_keys("s:", same, KeyStyle::kHashTag));
  CHECK(call.keys[0].find(":{") != std::string::npos);
}

TEST_CASE("cluster limiter: a denial in one slot refunds the other slot at once",
          "[ratelimit][cluster]") {
  ClusterHarness h;
  const auto keys = redis_keys("s:", h.descriptors, KeyStyle::kHashTag);
  REQUIRE(redis::cluster::key_slot(keys[0]) != redis::cluster::key_slot(keys[1]));
  std::optional<Outcome> out;
  bool requester_gone = false;
  SECTION("the requester waits") {}
  SECTION("the requester is gone: its handler does nothing, the refund still goes out") {
    requester_gone = true;
  }
  h.limiter->decide(h.descriptors, 1, [&](std::error_code ec, RateDecision d) {
    if (!requester_gone) out = Outcome{ec, d};
  });
  auto& c = h.client();
  // Both parts are sent at once, one per slot, each with its own bucket's ARGV.
  REQUIRE(c.calls.size() == 2);
  CHECK(c.calls[0].keys == std::vector<std::string>{keys[0]});
  CHECK(c.calls[1].keys == std::vector<std::string>{keys[1]});
  const LimitsCodec codec;
  CHECK(without_deadline(c.calls[0].args) ==
        without_deadline(codec.encode_args({&h.descriptors[0], 1}, 1)));
  // per_key allows (and debits), global denies.
  c.complete(0, {}, one_bucket_reply(true, 9));
  c.complete(1, {}, one_bucket_reply(false, 0.5));
  REQUIRE(h.loop.run_until([&] { return c.calls.size() == 3; }));
  const auto& refund = c.calls[2];
  CHECK(refund.sha1 == h.refund_sha);
  CHECK(refund.keys == std::vector<std::string>{keys[0]});
  CHECK(refund.args == codec.encode_refund_args(std::vector<BucketRefund>{{h.descriptors[0], 1}}));
  if (!requester_gone) {
    REQUIRE(out);
    CHECK_FALSE(out->ec);
    CHECK_FALSE(out->decision.allowed);
    CHECK(out->decision.limits[0].remaining == 10);  // as once refunded
    CHECK_FALSE(out->decision.limits[1].sufficient);
  }
  c.complete(2, {}, integer_reply(1));
  REQUIRE(h.loop.run_until(
      [&] { return h.counter("sluice_ratelimit_refunds_total", "result=\"ok\"") == 1; }));
}

TEST_CASE("cluster limiter: every slot allows: admitted, nothing refunded",
          "[ratelimit][cluster]") {
  ClusterHarness h;
  std::optional<Outcome> out;
  h.limiter->decide(h.descriptors, 1, [&out](std::error_code ec, RateDecision d) {
    out = Outcome{ec, d};
  });
  auto& c = h.client();
  REQUIRE(c.calls.size() == 2);
  c.complete(1, {}, one_bucket_reply(true, 99));
  c.complete(0, {}, one_bucket_reply(true, 9));
  REQUIRE(h.loop.run_until([&] { return out.has_value(); }));
  CHECK(out->decision.allowed);
  CHECK(out->decision.limits[0].remaining == 9);
  CHECK(out->decision.limits[1].remaining == 99);
  // Refunds go out before the answer is handed on: none was sent.
  CHECK(c.calls.size() == 2);
}

TEST_CASE("cluster limiter: a failed slot fails the request, refunds the other, opens no breaker",
          "[ratelimit][cluster]") {
  ClusterHarness h;
  auto& c = h.client();
  for (int round = 0; round < 3; ++round) {
    std::optional<Outcome> out;
    const std::size_t first = c.calls.size();
    h.limiter->decide(h.descriptors, 1, [&out](std::error_code ec, RateDecision d) {
      out = Outcome{ec, d};
    });
    REQUIRE(c.calls.size() == first + 2);
    c.complete(first, {}, one_bucket_reply(true, 9));
    c.complete(first + 1, redis::Error::kNotConnected);
    REQUIRE(h.loop.run_until([&] { return out.has_value(); }));
    CHECK(out->ec == redis::Error::kNotConnected);
    REQUIRE(h.loop.run_until([&] { return c.calls.size() == first + 3; }));
    CHECK(c.calls[first + 2].sha1 == h.refund_sha);
    c.complete(first + 2, redis::Error::kTimeout);
  }
  // failures: 1 would have opened a standalone breaker after the first round.
  CHECK_FALSE(h.limiter->circuit_open());
  REQUIRE(h.loop.run_until(
      [&] { return h.counter("sluice_ratelimit_refunds_total", "result=\"error\"") == 3; }));
}

TEST_CASE("cluster limiter: a denied request gives back the lease its other slot granted",
          "[ratelimit][cluster][lease]") {
  ClusterHarness h;
  std::optional<Outcome> out;
  h.limiter->decide(h.descriptors, 1, [&out](std::error_code ec, RateDecision d) {
    out = Outcome{ec, d};
  });
  auto& c = h.client();
  REQUIRE(c.calls.size() == 2);
  c.complete(0, {}, one_bucket_reply(true, 5, 4));  // debited 1 and leased 4
  c.complete(1, {}, one_bucket_reply(false, 0.5));
  REQUIRE(h.loop.run_until([&] { return c.calls.size() == 3; }));
  const LimitsCodec codec;
  CHECK(c.calls[2].args ==
        codec.encode_refund_args(std::vector<BucketRefund>{{h.descriptors[0], 5}}));
  REQUIRE(h.loop.run_until([&] { return out.has_value(); }));
  CHECK(out->decision.limits[0].leased == 0);
  CHECK(out->decision.limits[0].remaining == 10);
}

TEST_CASE("cluster limiter: refunds go one call per slot", "[ratelimit][cluster][lease]") {
  ClusterHarness h;
  std::optional<std::error_code> done;
  h.limiter->refund({{h.descriptors[0], 3}, {h.descriptors[1], 2}},
                    [&done](std::error_code ec) { done = ec; });
  auto& c = h.client();
  REQUIRE(c.calls.size() == 2);
  const LimitsCodec codec;
  CHECK(c.calls[0].sha1 == h.refund_sha);
  CHECK(c.calls[0].args ==
        codec.encode_refund_args(std::vector<BucketRefund>{{h.descriptors[0], 3}}));
  CHECK(c.calls[1].args ==
        codec.encode_refund_args(std::vector<BucketRefund>{{h.descriptors[1], 2}}));
  c.complete(0, {}, integer_reply(1));
  CHECK_FALSE(h.loop.run_until([&] { return done.has_value(); }, std::chrono::milliseconds(20)));
  c.complete(1, {}, integer_reply(1));
  REQUIRE(h.loop.run_until([&] { return done.has_value(); }));
  CHECK_FALSE(*done);
}

}  // namespace cross_slot_limiter_test
