// RedisRateLimiter on a real Redis Cluster (3 primaries, 3 replicas): the
// one-bucket decisions of a turn go out as one script call per primary (a
// node batch: keys of many slots read by the script without being declared),
// each decided as it would be alone; a request whose slot the node no longer
// serves (a migration halfway) is answered '' by the script, nothing written,
// and decided on its own where the slot now is; a batch redirected as a whole
// is never followed: each of its requests goes on its own.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "support/cluster_fixture.hpp"
#include "support/io_loop.hpp"
#include "upstream/redis/client_factory.hpp"
#include "upstream/redis/cluster/slot.hpp"

namespace node_batches_test {

using namespace std::chrono_literals;
using namespace sluice;
using sluice::redis::cluster::key_slot;
using sluice::test::ClusterFixture;
using sluice::test::Loop;

constexpr const char* kPrefix = "nb:";

struct Outcome {
  std::error_code ec;
  RateDecision decision;
};

struct ClusterLimiter {
  ClusterFixture& cluster = ClusterFixture::shared();
  Loop loop;
  MetricsShard metrics;
  RedisConfig config;
  std::optional<RedisRateLimiter> limiter;

  ClusterLimiter() {
    config.topology = RedisConfig::Topology::kCluster;
    config.host = "127.0.0.1";
    config.port = cluster.ports().front();
    config.timeout = 2000ms;
    config.key_prefix = kPrefix;
    auto make_client = redis::client_factory(loop.io.get_executor());
    limiter.emplace(loop.io.get_executor(), config, metrics, make_client(redis_options(config)),
                    make_client);
    limiter->connect();
    REQUIRE(loop.run_until([&] { return limiter->redis_ready(); }, 10s));
  }
  ~ClusterLimiter() { limiter->close(); }

  // The primaries, as the cluster sees them now.
  std::vector<std::uint16_t> primaries() {
    std::vector<std::uint16_t> out;
    for (const auto& node : cluster.view(cluster.ports().front())) {
      if (node.primary && !node.failed) out.push_back(node.port);
    }
    return out;
  }
  // EVALSHA calls the primaries answered since the last reset_stats().
  long long script_calls() {
    long long calls = 0;
    for (const std::uint16_t port : primaries()) {
      const std::string stats = cluster.command(port, {"INFO", "commandstats"});
      const auto at = stats.find("cmdstat_evalsha:calls=");
      if (at != std::string::npos) calls += std::stoll(stats.substr(at + 22));
    }
    return calls;
  }
  void reset_stats() {
    for (const std::uint16_t port : primaries()) {
      REQUIRE(cluster.command(port, {"CONFIG", "RESETSTAT"}) == "OK");
    }
  }

  // Decides every bucket in one turn of the loop (each a request of its own).
  std::vector<Outcome> decide_together(const std::vector<LimitDescriptor>& buckets) {
    std::vector<std::optional<Outcome>> outcomes(buckets.size());
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      limiter->decide({buckets[i]}, 1, [&outcomes, i](std::error_code ec, RateDecision d) {
        outcomes[i] = Outcome{ec, std::move(d)};
      });
    }
    REQUIRE(loop.run_until([&] {
      for (const auto& o : outcomes) {
        if (!o) return false;
      }
      return true;
    }));
    std::vector<Outcome> out;
    for (auto& o : outcomes) out.push_back(std::move(*o));
    return out;
  }
};

LimitDescriptor bucket(const std::string& value) {
  LimitDescriptor d;
  d.limit = "per_key";
  d.key_hash = key_hash(value);
  d.capacity = 10;
  d.refill_per_second = 0.001;
  return d;
}

std::string key_of(const LimitDescriptor& d) {
  return redis_key(kPrefix, d, KeyStyle::kHashTag);
}

TEST_CASE("node batches: one script call per primary for a turn of many slots, each decided alone",
          "[ratelimit][cluster][redis]") {
  ClusterLimiter h;
  std::vector<LimitDescriptor> buckets;
  for (int i = 0; i < 30; ++i) buckets.push_back(bucket("caller-" + std::to_string(i)));
  for (const auto& d : buckets) h.cluster.command(h.cluster.owner(key_slot(key_of(d))), {"DEL", key_of(d)});
  h.reset_stats();
  for (const double remaining : {9.0, 8.0}) {
    const std::vector<Outcome> outcomes = h.decide_together(buckets);
    for (const Outcome& o : outcomes) {
      REQUIRE_FALSE(o.ec);
      CHECK(o.decision.allowed);
      REQUIRE(o.decision.limits.size() == 1);
      CHECK(o.decision.limits[0].remaining == Approx(remaining).margin(0.01));
    }
  }
  // Two turns, three primaries: six calls for sixty decisions.
  CHECK(h.script_calls() <= 6);
  // Each bucket is stored under its own key, on the owner of its slot.
  for (const auto& d : buckets) {
    CHECK(h.cluster.command(h.cluster.owner(key_slot(key_of(d))), {"EXISTS", key_of(d)}) ==
          "(integer) 1");
  }
}

TEST_CASE("node batches: a request whose slot moved is decided on its own where the slot is now",
          "[ratelimit][cluster][redis]") {
  ClusterLimiter h;
  const std::vector<std::uint16_t> primaries = h.primaries();
  REQUIRE(primaries.size() >= 2);
  const std::uint16_t from = primaries[0];
  const std::uint16_t to = primaries[1];
  // Two buckets the same primary serves, in different slots: the batch goes
  // there (the first one's key routes it), and the second one's slot is
  // being moved away, its key already gone from there.
  std::optional<LimitDescriptor> staying;
  std::optional<LimitDescriptor> moving;
  for (int i = 0; i < 10000 && !moving; ++i) {
    LimitDescriptor d = bucket("mover-" + std::to_string(i));
    if (h.cluster.owner(key_slot(key_of(d))) != from) continue;
    if (!staying) {
      staying = d;
    } else if (key_slot(key_of(d)) != key_slot(key_of(*staying))) {
      moving = d;
    }
  }
  REQUIRE(moving);
  const std::string slot = std::to_string(key_slot(key_of(*moving)));
  // Fresh buckets (a section before may have left them).
  h.cluster.command(from, {"DEL", key_of(*staying)});
  h.cluster.command(from, {"DEL", key_of(*moving)});
  REQUIRE(h.cluster.command(to, {"CLUSTER", "SETSLOT", slot, "IMPORTING", h.cluster.id_of(from)}) ==
          "OK");
  REQUIRE(h.cluster.command(from, {"CLUSTER", "SETSLOT", slot, "MIGRATING", h.cluster.id_of(to)}) ==
          "OK");
  std::vector<LimitDescriptor> order = {*staying, *moving};
  SECTION("the staying bucket routes the batch: the moving one is answered '' and sent alone") {}
  SECTION("the moving bucket routes the batch: ASK, which it does not follow; each sent alone") {
    // (Followed, the whole batch would run after ASKING where the slot is
    // going, and the staying bucket would be decided there, on nothing.)
    order = {*moving, *staying};
  }
  const std::vector<Outcome> outcomes = h.decide_together(order);
  for (const Outcome& o : outcomes) {
    REQUIRE_FALSE(o.ec);
    CHECK(o.decision.allowed);
    REQUIRE(o.decision.limits.size() == 1);
    CHECK(o.decision.limits[0].remaining == Approx(9).margin(0.01));
  }
  // The staying bucket where it was; the moving one written once, where its
  // slot is going (after ASKING), and not where it was.
  CHECK(h.cluster.command(from, {"EXISTS", key_of(*staying)}) == "(integer) 1");
  // (A migrating slot's node redirects for a key it does not hold.)
  CHECK(h.cluster.command(from, {"EXISTS", key_of(*moving)}).rfind("ASK ", 0) == 0);
  const auto there = sluice::test::sync_commands(to, {{"ASKING"}, {"GET", key_of(*moving)}});
  CHECK(there.back() != "(nil)");
  // The migration abandoned: the key dropped where it went, the slot stays.
  CHECK(sluice::test::sync_commands(to, {{"ASKING"}, {"DEL", key_of(*moving)}}).back() ==
        "(integer) 1");
  CHECK(h.cluster.command(to, {"CLUSTER", "SETSLOT", slot, "STABLE"}) == "OK");
  CHECK(h.cluster.command(from, {"CLUSTER", "SETSLOT", slot, "STABLE"}) == "OK");
}

}  // namespace node_batches_test
