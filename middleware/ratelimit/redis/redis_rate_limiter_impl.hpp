// The Redis limiter's state and steps, shared by its two files:
// redis_rate_limiter.cpp (decisions: one call, a batch, across slots, late
// answers undone) and limiter_refunds.cpp (refunds and slot renewals). Only
// those two include it. On the limiter's executor.
#pragma once

#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"

#include <chrono>
#include <span>
#include <utility>

#include <boost/asio/any_io_executor.hpp>

#include "gateway/metrics.hpp"
#include "gateway/series_cache.hpp"
#include "middleware/ratelimit/algorithms/limits_codec.hpp"
#include "middleware/ratelimit/circuit_breaker.hpp"
#include "middleware/ratelimit/redis/breaker_probe.hpp"
#include "middleware/ratelimit/redis/bucket_admin.hpp"
#include "middleware/ratelimit/redis/client_switch.hpp"
#include "middleware/ratelimit/redis/cross_slot_call.hpp"
#include "middleware/ratelimit/redis/decision_batcher.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"
#include "middleware/ratelimit/redis/script_reply.hpp"
#include "middleware/ratelimit/redis/slot_plan.hpp"

namespace sluice {

class RedisRateLimiter::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(boost::asio::any_io_executor executor, const RedisConfig& config, MetricsShard& metrics,
       std::unique_ptr<redis::Client> client, redis::ClientFactory make_client)
      : executor_(std::move(executor)),
        metrics_(metrics),
        script_(std::string{codec_.script()}),
        refund_script_(std::string{codec_.refund_script()}),
        fleet_script_(std::string{kFleetHeartbeatScript}),
        read_script_(std::string{kBucketReadScript}),
        reset_script_(std::string{kBucketResetScript}),
        renew_script_(std::string{codec_.renew_script()}),
        key_prefix_(config.key_prefix),
        clients_(executor_, std::move(client), std::move(make_client),
                 {&script_, &refund_script_, &fleet_script_, &read_script_, &reset_script_,
                  &renew_script_}),
        breaker_(std::make_shared<BreakerProbe>(executor_, clients_, metrics,
                                                config.circuit_breaker.failures,
                                                config.circuit_breaker.open)) {
    codec_.set_deadline_after(script_deadline_after(config.timeout));
  }

  // Connect now rather than on the first decision (which would then fail open).
  void connect_now() { clients_.installed().connect({}); }

  // On a Redis Cluster the breaker stays closed: a dead node fails only the
  // requests whose slots it owned (its client fails them at once), and one
  // breaker for the whole cluster would fail every other slot with them.
  bool uses_breaker() const { return !clients_.by_slot(); }

  void decide(const std::vector<LimitDescriptor>& descriptors, double cost,
              RateDecisionHandler handler);

  // A decision call answered after the limiter stopped waiting: Redis ran it
  // after all (it was admitted before its deadline, but its answer was held
  // back: Redis writes replies after the commands of its whole pass). The
  // request was answered without it (fail open, closed or local), so what it
  // took belongs to nobody: it is given back at once.
  const std::shared_ptr<const redis::Client::LateReplyHandler>& late_handler();

  void undo_late(const std::vector<std::string>& keys, const std::vector<std::string>& args,
                 const redis::Reply& reply);

  void flush_batch();
  // One request of a batch decided on its own call (a node batch's request
  // whose slot the node no longer serves, or whose call was redirected).
  void decide_alone(QueuedDecision queued);

  CrossSlotContext cross_slot_context();

  // Calls send(indexes, counted) once per group of `keys` that share a hash
  // slot (one group in all on a single Redis); `done` (may be empty) gets the
  // first error once every call has told `counted` its outcome.
  template <class Send>
  void per_slot_group(const std::vector<std::string>& keys, bool by_slot, RefundHandler done,
                      Send send);

  // One refund call per slot (one in all on a single Redis). Not behind the
  // breaker: a refund that fails loses nothing but the tokens it carried.
  // On one Redis the refunds of a turn of the loop (concurrency slots' releases
  // above all) go out together at its end, in one call.
  void refund(std::vector<BucketRefund> refunds, RefundHandler done);

  // The refunds of this turn of the loop: those Redis takes as a plain
  // command (a slot given back: ZREM) pipelined, which costs Redis a fraction
  // of a script call, the rest in one script call; each caller hears the
  // first error once all have answered.
  void flush_refunds();

  void send_refunds(std::vector<BucketRefund> refunds, RefundHandler done);

  // One renew_slots.lua call per slot group; not behind the breaker.
  void renew(std::vector<LimitDescriptor> slots, RefundHandler done);

  void on_reply(std::error_code ec, redis::Reply reply, std::size_t count,
                const RateDecisionHandler& handler);

  // A decision's outcome: counted, fed to the breaker, handed on.
  void on_outcome(std::error_code ec, RateDecision&& decision, const RateDecisionHandler& handler);

  void fleet_heartbeat(const std::string& instance_id, std::chrono::milliseconds ttl, bool leave,
                       FleetHandler handler);

  // The admin API's reads and resets (bucket_admin.hpp), not behind the breaker.
  void inspect(const LimitDescriptor& bucket, BucketViewHandler handler);
  void reset(const LimitDescriptor& bucket, RefundHandler done);

  void on_refund(std::error_code ec);

  void reconfigure(const RedisConfig& config);

  void export_metrics();

  std::vector<redis::NodeStatus> nodes() const { return clients_.installed().nodes(); }

  void close() {
    breaker_->close();
    clients_.close();
  }

  boost::asio::any_io_executor executor_;
  MetricsShard& metrics_;
  SeriesCache refunds_counted_{metrics_, "sluice_ratelimit_refunds_total", "result"};
  LimitsCodec codec_;
  redis::Script script_;
  redis::Script refund_script_;
  redis::Script fleet_script_;
  redis::Script read_script_;
  redis::Script reset_script_;
  redis::Script renew_script_;
  std::string key_prefix_;
  ClientSwitch clients_;
  std::shared_ptr<BreakerProbe> breaker_;
  DecisionBatcher batcher_;
  // Refunds of this turn of the loop, sent together (refund()), and who waits.
  std::vector<BucketRefund> refund_batch_;
  std::vector<RefundHandler> refund_waiters_;
  std::shared_ptr<const redis::Client::LateReplyHandler> late_;  // late_handler()
};

}  // namespace sluice
