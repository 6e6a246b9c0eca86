// Cost from the response: what a usage value may be, and what a request
// really cost from how its exchange ended.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/settlement/settlement.hpp"
#include "upstream/redis/error.hpp"

namespace settlement_test {

using sluice::CostFromResponse;
using sluice::ExchangeEnd;

TEST_CASE("settlement: a usage value is a whole number of at most 2^53, digits only",
          "[settlement][unit]") {
  CHECK(sluice::parse_usage("120") == 120);
  CHECK(sluice::parse_usage(" 0 ") == 0);
  CHECK(sluice::parse_usage("007") == 7);
  CHECK(sluice::parse_usage("9007199254740992") == 9007199254740992.0);
  CHECK_FALSE(sluice::parse_usage("9007199254740993"));  // above 2^53
  CHECK_FALSE(sluice::parse_usage("99999999999999999999"));
  // Leading zeros, however many, leave the value as it is.
  CHECK(sluice::parse_usage("00000000000000900") == 900);
  CHECK(sluice::parse_usage("00009007199254740992") == 9007199254740992.0);
  CHECK(sluice::parse_usage("00000000000000000000") == 0);
  CHECK_FALSE(sluice::parse_usage("00009007199254740993"));
  CHECK_FALSE(sluice::parse_usage("000099999999999999999"));
  for (const char* bad : {"", "-1", "1.5", "12abc", "1e3", "+5", "0x10", "1 2"}) {
    CAPTURE(bad);
    CHECK_FALSE(sluice::parse_usage(bad));
  }
}

TEST_CASE("settlement: the real cost from the status and the usage the response carried",
          "[settlement][unit]") {
  CostFromResponse settle;
  settle.header = "X-Usage-Tokens";
  settle.statuses = {{200, 299}, {304, 304}};
  const auto end = [](unsigned status, std::optional<std::string> usage) {
    ExchangeEnd e;
    e.status = status;
    e.usage = std::move(usage);
    return e;
  };
  CHECK(sluice::settled_cost(settle, end(200, "120"), 500) == 120);
  CHECK(sluice::settled_cost(settle, end(201, "9000"), 500) == 9000);
  CHECK(sluice::settled_cost(settle, end(304, "3"), 500) == 3);
  CHECK(sluice::settled_cost(settle, end(500, "120"), 500) == 0);  // not counted: free
  CHECK(sluice::settled_cost(settle, end(404, std::nullopt), 500) == 0);
  CHECK(sluice::settled_cost(settle, end(200, std::nullopt), 500) == 500);  // none came
  CHECK(sluice::settled_cost(settle, end(200, ""), 500) == 500);  // sent twice
  CHECK(sluice::settled_cost(settle, end(200, "12abc"), 500) == 500);
  CHECK(sluice::settled_cost(settle, end(0, "120"), 500) == 500);  // no response at all
  settle.statuses.clear();  // every status counts
  CHECK(sluice::settled_cost(settle, end(503, "7"), 500) == 7);
}

TEST_CASE("settlement: the limits a request debited", "[settlement][unit]") {
  using namespace sluice;
  LimitDescriptor enforced{"tokens", {}, 1000, 1};
  LimitDescriptor shadow_short{"trial", {}, 10, 1};
  shadow_short.shadow = true;
  LimitDescriptor shadow_room{"audit", {}, 10, 1};
  shadow_room.shadow = true;
  LimitDescriptor slots{"in_flight", {}, 4};
  slots.algorithm = LimitAlgorithm::kConcurrency;
  const std::vector<LimitDescriptor> descriptors{enforced, shadow_short, shadow_room, slots};
  RateDecision decision;
  decision.allowed = true;
  decision.limits.resize(4);
  decision.limits[0].sufficient = true;
  decision.limits[1].sufficient = false;  // a shadow limit short: never debited
  decision.limits[2].sufficient = true;
  decision.limits[3].sufficient = true;  // a slot, not the cost
  std::vector<LimitDescriptor> debited;
  append_debited(debited, descriptors, decision);
  REQUIRE(debited.size() == 2);
  CHECK(debited[0].limit == "tokens");
  CHECK(debited[1].limit == "audit");
}

}  // namespace settlement_test

namespace settlement_retry_test {

using namespace sluice;

// Answers each refund with the next of `results` (then success), at once.
class ScriptedStore final : public RateLimiter {
 public:
  void decide(const std::vector<LimitDescriptor>&, double, RateDecisionHandler) override {}
  void refund(std::vector<BucketRefund> r, RefundHandler done) override {
    calls.push_back(r);
    std::error_code ec;
    if (!results.empty()) {
      ec = results.front();
      results.erase(results.begin());
    }
    if (done) done(ec);
  }
  bool refunds_together() const override { return together; }
  bool together = false;
  std::vector<std::error_code> results;
  std::vector<std::vector<BucketRefund>> calls;
};

struct Fixture {
  boost::asio::io_context io;
  MetricsShard metrics;
  std::shared_ptr<ScriptedStore> store = std::make_shared<ScriptedStore>();
  std::shared_ptr<Settler> settler =
      std::make_shared<Settler>(io.get_executor(), store, metrics);
  std::vector<LimitDescriptor> limits{LimitDescriptor{"tokens", {}, 1000, 1}};
  // Settles a request of route "r" (estimate 500, real 120) and runs the end
  // of the turn, which sends what was settled in it.
  void settle_one() {
    settler->settle("r", limits, 500, 120, 0);
    end_turn();
  }
  void end_turn() {
    io.restart();
    io.poll();
  }
  double counted(std::string_view result) {
    return metrics.value_ref("sluice_ratelimit_settlements_total",
                             scratch_labels({{"route", "r"}, {"result", result}}));
  }
};

TEST_CASE("settlement: sent again only when it never reached Redis", "[settlement][unit]") {
  Fixture f;
  f.store->results = {redis::make_error_code(redis::Error::kNotConnected)};
  f.settler->settle("r", f.limits, 500, 120, 0);
  CHECK(f.store->calls.empty());  // sent at the end of the turn
  f.end_turn();
  CHECK(f.store->calls.size() == 1);
  CHECK(f.settler->queued() == 1);  // waits a second
  f.io.restart();
  f.io.run_for(std::chrono::milliseconds(1500));
  CHECK(f.store->calls.size() == 2);
  CHECK(f.counted("refund") == 1);

  // A timeout: Redis may have run it; counted unknown, never sent again.
  f.store->results = {redis::make_error_code(redis::Error::kTimeout)};
  f.settle_one();
  CHECK(f.settler->queued() == 0);
  CHECK(f.store->calls.size() == 3);
  CHECK(f.counted("unknown") == 1);
  CHECK(f.counted("failed") == 0);
  // A connection lost in flight: the same.
  f.store->results = {redis::make_error_code(redis::Error::kConnectionLost)};
  f.settle_one();
  CHECK(f.store->calls.size() == 4);
  CHECK(f.counted("unknown") == 2);
  CHECK(f.counted("failed") == 0);
}

TEST_CASE("settlement: the stop sends what waits at once, and nothing waits after it",
          "[settlement][unit]") {
  Fixture f;
  f.store->results = {redis::make_error_code(redis::Error::kNotConnected)};
  f.settle_one();
  REQUIRE(f.settler->queued() == 1);
  f.settler->drain();
  CHECK(f.store->calls.size() == 2);  // sent now, not in a second
  CHECK(f.settler->queued() == 0);
  CHECK(f.counted("refund") == 1);
  // Settled while stopping: sent at once, not at the end of the turn (the
  // drain waits only for calls in flight).
  f.store->results = {redis::make_error_code(redis::Error::kNotConnected)};
  f.settler->settle("r", f.limits, 500, 120, 0);
  CHECK(f.store->calls.size() == 3);
  CHECK(f.settler->queued() == 0);  // dropped and counted
  CHECK(f.counted("failed") == 1);
  f.io.restart();
  f.io.run_for(std::chrono::milliseconds(1200));
  CHECK(f.store->calls.size() == 3);  // nothing more: nothing waits after the stop
}

TEST_CASE("settlement: the stop sends what this turn settled", "[settlement][unit]") {
  Fixture f;
  f.settler->settle("r", f.limits, 500, 120, 0);
  CHECK(f.store->calls.empty());
  f.settler->drain();
  CHECK(f.store->calls.size() == 1);
  CHECK(f.counted("refund") == 1);
}

TEST_CASE("settlement: one turn's settlements go as one refund call where its outcome is "
          "each refund's, else each part on its own", "[settlement][unit]") {
  Fixture f;
  f.limits.push_back(LimitDescriptor{"daily", {}, 5000, 1});
  f.store->together = true;  // one Redis
  f.settler->settle("r", f.limits, 500, 120, 0);
  f.settler->settle("r", f.limits, 500, 100, 0);
  f.end_turn();
  REQUIRE(f.store->calls.size() == 1);
  REQUIRE(f.store->calls[0].size() == 4);
  CHECK(f.store->calls[0][0].tokens == 380);
  CHECK(f.store->calls[0][1].bucket.limit == "daily");
  CHECK(f.store->calls[0][3].tokens == 400);
  CHECK(f.counted("refund") == 2);

  // Never reached Redis: the whole call waits and goes again as it was.
  f.store->results = {redis::make_error_code(redis::Error::kNotConnected)};
  f.settler->settle("r", f.limits, 500, 120, 0);
  f.end_turn();
  CHECK(f.settler->queued() == 2);
  f.io.restart();
  f.io.run_for(std::chrono::milliseconds(1500));
  REQUIRE(f.store->calls.size() == 3);
  CHECK(f.store->calls[2].size() == 2);
  CHECK(f.counted("refund") == 3);

  // Parked as one call, sent again after the topology changed to one whose
  // calls may fail apart (a reload to a Redis Cluster): a call per part.
  f.store->results = {redis::make_error_code(redis::Error::kNotConnected)};
  f.settler->settle("r", f.limits, 500, 120, 0);
  f.end_turn();
  CHECK(f.settler->queued() == 2);
  f.store->together = false;
  f.io.restart();
  f.io.run_for(std::chrono::milliseconds(1500));
  REQUIRE(f.store->calls.size() == 6);
  CHECK(f.store->calls[4].size() == 1);
  CHECK(f.store->calls[5].size() == 1);
  CHECK(f.counted("refund") == 4);

  // Refunds sent per slot (a Redis Cluster): each part on its own, and the
  // settlement counted by its worst part.
  f.store->results = {{}, redis::make_error_code(redis::Error::kTimeout)};
  f.settler->settle("r", f.limits, 500, 120, 0);
  f.end_turn();
  REQUIRE(f.store->calls.size() == 8);
  CHECK(f.store->calls[6].size() == 1);
  CHECK(f.store->calls[7].size() == 1);
  CHECK(f.counted("unknown") == 1);
  CHECK(f.counted("refund") == 4);
}

}  // namespace settlement_retry_test
