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
  RateDecision admitted() {
    RateDecision d;
    d.allowed = true;
    d.limits.resize(limits.size());
    return d;
  }
  double counted(std::string_view result) {
    return metrics.value_ref("sluice_ratelimit_settlements_total",
                             scratch_labels({{"route", "r"}, {"result", result}}));
  }
};

TEST_CASE("settlement: sent again only when it never reached Redis", "[settlement][unit]") {
  Fixture f;
  f.store->results = {redis::make_error_code(redis::Error::kNotConnected)};
  f.settler->settle("r", f.limits, f.admitted(), 500, 120, 0);
  CHECK(f.store->calls.size() == 1);
  CHECK(f.settler->queued() == 1);  // waits a second
  f.io.run_for(std::chrono::milliseconds(1500));
  CHECK(f.store->calls.size() == 2);
  CHECK(f.counted("refund") == 1);

  // A timeout: Redis may have run it; counted unknown, never sent again.
  f.store->results = {redis::make_error_code(redis::Error::kTimeout)};
  f.settler->settle("r", f.limits, f.admitted(), 500, 120, 0);
  CHECK(f.settler->queued() == 0);
  CHECK(f.store->calls.size() == 3);
  CHECK(f.counted("unknown") == 1);
  CHECK(f.counted("failed") == 0);
  // A connection lost in flight: the same.
  f.store->results = {redis::make_error_code(redis::Error::kConnectionLost)};
  f.settler->settle("r", f.limits, f.admitted(), 500, 120, 0);
  CHECK(f.store->calls.size() == 4);
  CHECK(f.counted("unknown") == 2);
  CHECK(f.counted("failed") == 0);
}

TEST_CASE("settlement: the stop sends what waits at once, and nothing waits after it",
          "[settlement][unit]") {
  Fixture f;
  f.store->results = {redis::make_error_code(redis::Error::kNotConnected)};
  f.settler->settle("r", f.limits, f.admitted(), 500, 120, 0);
  REQUIRE(f.settler->queued() == 1);
  f.settler->drain();
  CHECK(f.store->calls.size() == 2);  // sent now, not in a second
  CHECK(f.settler->queued() == 0);
  CHECK(f.counted("refund") == 1);
  f.store->results = {redis::make_error_code(redis::Error::kNotConnected)};
  f.settler->settle("r", f.limits, f.admitted(), 500, 120, 0);
  CHECK(f.settler->queued() == 0);  // dropped and counted
  CHECK(f.counted("failed") == 1);
  f.io.run_for(std::chrono::milliseconds(1200));
  CHECK(f.store->calls.size() == 3);  // the cancelled wait sent nothing more
}

}  // namespace settlement_retry_test
