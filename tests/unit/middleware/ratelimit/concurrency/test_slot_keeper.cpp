// The slots a worker holds are renewed before their leases run out, also a
// slot of a shorter lease taken while longer ones are held.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/concurrency/slot_keeper.hpp"

namespace slot_keeper_test {

using namespace sluice;
using Clock = std::chrono::steady_clock;

class RenewRecorder final : public RateLimiter {
 public:
  void decide(const std::vector<LimitDescriptor>&, double, RateDecisionHandler) override {}
  void refund(std::vector<BucketRefund> r, RefundHandler) override {
    refunds.insert(refunds.end(), r.begin(), r.end());
  }
  void renew(std::vector<LimitDescriptor> slots, RefundHandler) override {
    for (const auto& s : slots) renewals.push_back({s.slot, Clock::now()});
  }
  struct Renewal {
    double slot;
    Clock::time_point at;
  };
  std::vector<Renewal> renewals;
  std::vector<BucketRefund> refunds;
};

LimitDescriptor slot(double number, double lease_ms) {
  LimitDescriptor d;
  d.limit = "in_flight";
  d.algorithm = LimitAlgorithm::kConcurrency;
  d.slot = number;
  d.lease_ms = lease_ms;
  return d;
}

TEST_CASE("slot keeper: a shorter lease taken later is renewed within its own third",
          "[concurrency][unit]") {
  boost::asio::io_context io;
  MetricsShard metrics;
  auto limiter = std::make_shared<RenewRecorder>();
  auto keeper = std::make_shared<SlotKeeper>(io.get_executor(), limiter, metrics);
  const LimitDescriptor slow = slot(1, 9000);  // renewed every 3 s
  const LimitDescriptor fast = slot(2, 900);   // every 300 ms
  keeper->hold({&slow, 1});
  Clock::time_point fast_taken;
  boost::asio::steady_timer later(io, std::chrono::milliseconds(50));
  later.async_wait([&](auto) {
    fast_taken = Clock::now();
    keeper->hold({&fast, 1});
  });
  // Runs until the fast slot's first renewal (bounded: 2 s of the loop).
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < deadline &&
         std::none_of(limiter->renewals.begin(), limiter->renewals.end(),
                      [](const auto& r) { return r.slot == 2; })) {
    io.run_one_for(std::chrono::milliseconds(50));
  }
  const auto first = std::find_if(limiter->renewals.begin(), limiter->renewals.end(),
                                  [](const auto& r) { return r.slot == 2; });
  REQUIRE(first != limiter->renewals.end());
  // Well within its 900 ms lease (a third of it, plus the loop's slack).
  CHECK(first->at - fast_taken < std::chrono::milliseconds(700));

  // Given back: released once, never renewed again.
  keeper->release({&fast, 1});
  keeper->release({&fast, 1});
  CHECK(limiter->refunds.size() == 1);
  CHECK(keeper->held() == 1);
}

}  // namespace slot_keeper_test
