// The local layer: a RateLimiter in front of the store's limiter (Redis) that
// answers what it can without asking it, and never admits what the store
// would not have:
// - the denial cache (deny_cache.hpp): a bucket the store just reported short
//   of tokens is denied locally until it can have refilled (at most 1 s);
// - leases (lease_table.hpp): on a busy bucket of a limit with lease_tokens,
//   the store's call for one request also takes a few tokens ahead, debited
//   in the store at once, which this worker then spends locally; a lease
//   running low is topped up in the background by a call that decides no
//   request (cost 0); the unspent rest goes back when the lease expires, the
//   configuration changes, or the worker drains.
// A request whose buckets are all covered by leases, or one of whose buckets
// is cached as denied, needs no store call; the others go to the store in one
// call, which renews the leases of their busy buckets in passing. A request
// on a single leased bucket whose lease ran out while the next one is on its
// way waits for that lease instead of a call of its own.
//
// One per worker, created, used and destroyed on its executor; every handler
// is called there, never from inside decide(). While either table holds
// anything a sweep runs every 100 ms: expired leases go back, and (at most
// once a second) expired denials leave the cache, so an idle worker holds
// neither. The store's limiter must stay
// valid while the layer lives. The descriptors passed to decide() must stay
// valid until its handler has been called (they are read again then).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/recycler.hpp"
#include "gateway/config/config.hpp"
#include "middleware/ratelimit/local/deny_cache.hpp"
#include "middleware/ratelimit/local/lease_table.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

class MetricsShard;

// Microseconds of the steady clock.
std::int64_t steady_now_us();

class LocalLayer final : public RateLimiter, public std::enable_shared_from_this<LocalLayer> {
 public:
  using Clock = std::function<std::int64_t()>;  // microseconds, steady
  // Told how many bytes a sweep freed (expired denials), so that the process
  // can give them back to the system.
  using Freed = std::function<void(std::size_t)>;

  LocalLayer(boost::asio::any_io_executor executor, std::shared_ptr<RateLimiter> store,
             MetricsShard& metrics, const LocalConfig& config, Clock now_us = steady_now_us,
             Freed freed = nullptr);

  void decide(const std::vector<LimitDescriptor>& descriptors, double cost,
              RateDecisionHandler handler) override;
  // A lease or a remembered denial answers here, at once; anything else goes
  // to the store with the handler.
  std::optional<RateDecision> decide_or_wait(const std::vector<LimitDescriptor>& descriptors,
                                             double cost, RateDecisionHandler& handler) override;
  // Forwards to the store; the refunded buckets leave this worker's cache.
  void refund(std::vector<BucketRefund> refunds, RefundHandler done) override;
  bool refunds_together() const override { return store_->refunds_together(); }
  bool draining() const override { return draining_; }
  void renew(std::vector<LimitDescriptor> slots, RefundHandler done) override;

  // Reads the bucket from the store (a lease held here was debited there).
  void inspect(const LimitDescriptor& bucket, BucketViewHandler handler) override;
  // Forgets the bucket in the store, then (only if the store did) here.
  void reset(const LimitDescriptor& bucket, RefundHandler done) override;
  // The bucket was reset: its denial leaves the cache and its lease is
  // dropped without a refund (the bucket is full again anyway). Answers to
  // calls sent before now are fenced off: their denials are not cached and
  // their leases are given back.
  void forget(const LimitDescriptor& bucket);

  // A new configuration: the cache is emptied (limits may have changed) and
  // every lease given back.
  void reconfigure(const LocalConfig& config);
  // Gives every lease back, then calls `done` once the store has answered
  // every call that may grant or give back tokens (or they failed). Later
  // decisions go straight to the store.
  void drain(std::function<void()> done);

  const DenyCache& deny_cache() const { return cache_; }
  const LeaseTable& leases() const { return leases_; }

 private:
  struct LeasedCall;
  // A plain store call's completion, parked while the call is out (the
  // store's handler then holds the pointer, kept in place, not the handler).
  struct StoreCall {
    const std::vector<LimitDescriptor>* descriptors = nullptr;
    double cost = 0;
    std::int64_t asked_at = 0;
    RateDecisionHandler handler;
  };
  // The store answered a plain call: its denials remembered, then its handler.
  void on_store_answer(std::unique_ptr<StoreCall> call, std::error_code ec,
                       RateDecision&& decision);

  std::optional<RateDecision> cached_denial(const std::vector<LimitDescriptor>& descriptors,
                                            double cost, std::int64_t now,
                                            const std::vector<std::uint8_t>& from_lease);
  // `may_wait`: a request on one leased bucket whose lease is spent while
  // the next one is on its way waits for it (up to kMaxWaiters per bucket)
  // rather than asking Redis on its own.
  // Answers a decision it has at once (the handler left untouched), else
  // takes the handler and answers it later.
  std::optional<RateDecision> decide_with_leases(const std::vector<LimitDescriptor>& descriptors,
                                                 double cost, std::int64_t now,
                                                 RateDecisionHandler& handler,
                                                 bool may_wait = true);
  // The ask for `bucket`'s lease came back: its waiters are decided again,
  // from the new lease (`granted`), else by Redis, without waiting again.
  void release_waiters(const LimitDescriptor& bucket, bool granted);
  void on_leased_answer(const LeasedCall& call, const std::vector<LimitDescriptor>& descriptors,
                        double cost, std::error_code ec, RateDecision decision,
                        const RateDecisionHandler& handler);
  // The leases a store call asked for: kept, given back when no longer
  // wanted, or their ask closed when none came.
  void take_leases(std::span<const LimitDescriptor> asked, std::error_code ec,
                   const RateDecision& decision, std::int64_t sent_us);
  void finish_drain_when_idle();
  void send_top_up(const LimitDescriptor& bucket, double tokens);
  void remember_denials(std::span<const LimitDescriptor> asked, double cost,
                        const RateDecision& decision, std::int64_t asked_at);
  void put_back(const std::vector<LimitDescriptor>& descriptors, double cost,
                const std::vector<std::uint8_t>& from_lease);
  void answer_now(RateDecisionHandler handler, RateDecision decision);
  void give_back(std::vector<BucketRefund> refunds, RefundHandler done = nullptr);
  void arm_sweep();
  void sweep();

  // When buckets were last reset, or refunded.
  using FenceTimes = std::unordered_map<BucketKey, std::int64_t, BucketKeyHash>;
  // Whether a call sent at `sent_us` predates the bucket's time in `times`:
  // after a reset its answer is stale (no denial cached, leases go back);
  // after a refund its denial may be.
  static bool sent_before(const FenceTimes& times, const LimitDescriptor& bucket,
                          std::int64_t sent_us);

  // Answers older than this are not awaited after a reset (store calls time out sooner).
  static constexpr std::int64_t kFenceUs = 10'000'000;

  boost::asio::any_io_executor executor_;
  std::shared_ptr<RateLimiter> store_;
  MetricsShard& metrics_;
  Clock now_us_;
  Freed freed_;
  bool deny_cache_on_;
  bool draining_ = false;
  std::function<void()> drained_;  // the drain's completion, until it has run
  FenceTimes reset_at_;            // recent resets
  // Recent refunds (with the denial cache on): a denial answered to a call
  // sent before one is not remembered. The latest refund's time per slot of
  // a fixed table, the slot chosen by the bucket's key hash: buckets that
  // share a slot share their latest time, which can only keep a denial out
  // of the cache (never let a stale one in). Fixed size, nothing allocated
  // per refund.
  static constexpr std::size_t kRefundSlots = 4096;
  static std::size_t refund_slot(const LimitDescriptor& bucket);
  std::array<std::int64_t, kRefundSlots> refunded_at_{};
  bool refunded_ = false;  // some refund was noted since the last clear
  // Store calls out that may grant leases, return leased tokens or refund.
  std::size_t calls_out_ = 0;
  DenyCache cache_;
  LeaseTable leases_;
  struct Waiter {
    const std::vector<LimitDescriptor>* descriptors;
    double cost;
    RateDecisionHandler handler;
  };
  static constexpr std::size_t kMaxWaiters = 256;
  std::unordered_map<BucketKey, std::vector<Waiter>, BucketKeyHash> waiters_;
  Recycler<StoreCall> store_calls_{256};
  boost::asio::steady_timer sweep_timer_;
  bool sweep_armed_ = false;
  std::int64_t cache_purged_us_ = 0;  // when the sweep last purged the denial cache
};

}  // namespace sluice
