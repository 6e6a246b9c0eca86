// The slots a worker holds are renewed before their leases run out, also a
// slot of a shorter lease taken while longer ones are held.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/concurrency/slot_keeper.hpp"
#include "upstream/redis/error.hpp"

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
  CHECK(limiter->refunds.empty());  // given back at the end of the turn
  io.restart();
  io.poll();
  CHECK(limiter->refunds.size() == 1);
  CHECK(keeper->held() == 1);
}

}  // namespace slot_keeper_test

namespace slot_keeper_test {

// Answers each refund with the next of `results` (then success), posted.
class ReleaseAnswers final : public RateLimiter {
 public:
  explicit ReleaseAnswers(boost::asio::io_context& io) : io_(io) {}
  void decide(const std::vector<LimitDescriptor>&, double, RateDecisionHandler) override {}
  void renew(std::vector<LimitDescriptor>, RefundHandler) override {}
  void refund(std::vector<BucketRefund> r, RefundHandler done) override {
    calls.push_back(r);
    std::error_code ec;
    if (next_ < results.size()) ec = results[next_++];
    boost::asio::post(io_, [done, ec] { done(ec); });
  }
  bool refunds_together() const override { return together; }
  bool draining() const override { return stopping; }
  bool together = true;
  bool stopping = false;
  std::vector<std::error_code> results;
  std::vector<std::vector<BucketRefund>> calls;

 private:
  boost::asio::io_context& io_;
  std::size_t next_ = 0;
};

double released(MetricsShard& metrics, std::string_view result) {
  return metrics.value_ref("sluice_ratelimit_slot_releases_total",
                           scratch_labels({{"result", result}}));
}

TEST_CASE("slot keeper: a release whose answer never came is sent again",
          "[concurrency][unit]") {
  boost::asio::io_context io;
  MetricsShard metrics;
  auto limiter = std::make_shared<ReleaseAnswers>(io);
  auto keeper = std::make_shared<SlotKeeper>(io.get_executor(), limiter, metrics);
  const LimitDescriptor a = slot(16, 30000);
  keeper->hold({&a, 1});

  SECTION("a timeout, then an answer: released") {
    limiter->results = {redis::make_error_code(redis::Error::kTimeout)};
    keeper->release({&a, 1});
    io.run_for(std::chrono::milliseconds(1500));
    REQUIRE(limiter->calls.size() == 2);
    CHECK(limiter->calls[1].size() == 1);
    CHECK(limiter->calls[1][0].bucket.slot == 16);
    CHECK(released(metrics, "released") == 1);
    CHECK(released(metrics, "unknown") == 0);
  }
  SECTION("unanswered every time: unknown") {
    const auto timeout = redis::make_error_code(redis::Error::kTimeout);
    limiter->results = {timeout, timeout, timeout};
    keeper->release({&a, 1});
    io.run_for(std::chrono::milliseconds(2500));
    CHECK(limiter->calls.size() == 3);
    CHECK(released(metrics, "unknown") == 1);
  }
  SECTION("never reached Redis every time: failed") {
    const auto down = redis::make_error_code(redis::Error::kNotConnected);
    limiter->results = {down, down, down};
    keeper->release({&a, 1});
    io.run_for(std::chrono::milliseconds(2500));
    CHECK(limiter->calls.size() == 3);
    CHECK(released(metrics, "failed") == 1);
  }
}

TEST_CASE("slot keeper: a turn's releases go together on one Redis, one by one on a cluster, "
          "at once while stopping", "[concurrency][unit]") {
  boost::asio::io_context io;
  MetricsShard metrics;
  auto limiter = std::make_shared<ReleaseAnswers>(io);
  auto keeper = std::make_shared<SlotKeeper>(io.get_executor(), limiter, metrics);
  const LimitDescriptor a = slot(32, 30000);
  const LimitDescriptor b = slot(33, 30000);
  const auto hold_both = [&] {
    keeper->hold({&a, 1});
    keeper->hold({&b, 1});
  };
  const auto end_turn = [&] {
    io.restart();
    io.poll();
  };

  hold_both();
  keeper->release({&a, 1});
  keeper->release({&b, 1});
  CHECK(limiter->calls.empty());  // at the end of the turn
  end_turn();
  REQUIRE(limiter->calls.size() == 1);
  CHECK(limiter->calls[0].size() == 2);
  CHECK(released(metrics, "released") == 2);

  limiter->together = false;  // a Redis Cluster: each by its own outcome
  hold_both();
  keeper->release({&a, 1});
  keeper->release({&b, 1});
  end_turn();
  REQUIRE(limiter->calls.size() == 3);
  CHECK(limiter->calls[1].size() == 1);
  CHECK(limiter->calls[2].size() == 1);
  CHECK(released(metrics, "released") == 4);

  limiter->stopping = true;  // the drain waits only for calls in flight
  hold_both();
  keeper->release({&a, 1});
  CHECK(limiter->calls.size() == 4);
  CHECK(keeper->held() == 1);
}

}  // namespace slot_keeper_test
