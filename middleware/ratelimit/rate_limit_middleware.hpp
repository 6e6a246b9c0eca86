// The rate-limit middleware: builds the request's bucket descriptors from the
// route's limits, asks the RateLimiter, and either continues with the
// rate-limit headers queued for the response, answers 429, or applies the
// route's failure mode when the limiter cannot decide: forward (open), 503
// (closed), or decide at this instance's share with the process's
// FallbackStore (local), answered like any decision. A decision Redis
// itself made empties the fallback store (Redis decides again). On a route
// with on_limit: delay, a request whose tokens were reserved waits on a timer
// (at most max_delay_ms) and then continues; if its client leaves first, the
// reservation is refunded. Shadow limits are counted but never shown to the
// client. Runs on the worker's executor; the limiter's completion and the
// timer arrive there too.
#pragma once

#include <chrono>
#include <memory>
#include <system_error>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "gateway/middleware.hpp"
#include "gateway/series_cache.hpp"
#include "middleware/ratelimit/concurrency/slot_keeper.hpp"
#include "middleware/ratelimit/decision_counters.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"
#include "middleware/ratelimit/settlement/settlement.hpp"

namespace sluice {

class ConsumerResolver;
class DelayedRequest;
class DenialAudit;
class FallbackStore;
class MetricsShard;
struct Identity;
struct RateOutcome;
struct RequestView;

// Retry-After of a fail-closed 503: the limiter's expected unavailable time in
// whole seconds, rounded up, at least 1.
long unavailable_retry_after(const RateDecision& decision);

class RateLimitMiddleware final : public Middleware,
                                  public std::enable_shared_from_this<RateLimitMiddleware> {
 public:
  using Executor = boost::asio::io_context::executor_type;

  // `fallback` decides for routes with on_redis_failure: local; without one
  // (tests) those routes fail closed. Delayed requests wait on `executor`.
  // `consumers` looks keys up in the consumer store (api_keys.store: redis);
  // without one every such key is treated as unknown.
  RateLimitMiddleware(const Executor& executor, std::shared_ptr<RateLimiter> limiter,
                      MetricsShard& metrics, std::shared_ptr<FallbackStore> fallback = nullptr,
                      std::shared_ptr<ConsumerResolver> consumers = nullptr,
                      std::shared_ptr<DenialAudit> audit = nullptr,
                      std::shared_ptr<Settler> settler = nullptr)
      : executor_(executor),
        limiter_(std::move(limiter)),
        metrics_(metrics),
        decision_counters_(metrics),
        local_decisions_(metrics, "sluice_ratelimit_local_decisions_total", "route", "kind"),
        check_duration_(metrics.histogram_ref("sluice_ratelimit_check_duration_seconds", "")),
        fallback_(std::move(fallback)),
        consumers_(std::move(consumers)),
        audit_(std::move(audit)),
        slots_(std::make_shared<SlotKeeper>(executor_, limiter_, metrics_)),
        settler_(settler ? std::move(settler)
                         : std::make_shared<Settler>(executor_, limiter_, metrics_)) {}

  // Identifies the caller first (with the consumer store: from the cache at
  // once, or after one lookup): a key no consumer holds gets 401 with
  // unknown_key: reject, a disabled consumer 403, and the consumer's headers
  // are queued for the upstream. Then continues at once for a route without
  // limits, answers at once a request whose key sources are refused, and
  // otherwise completes when the limiter does.
  MiddlewareResult on_request(RequestContext& ctx, MiddlewareLater& later) override;

 private:
  using Descriptors = std::vector<LimitDescriptor>;

  // A decision asked of the limiter, until it answers.
  struct PendingDecision {
    std::shared_ptr<std::vector<LimitDescriptor>> descriptors;
    double cost = 0;
    std::chrono::steady_clock::time_point started;
    std::shared_ptr<DelayedRequest> delayed;  // on a delay route only
    MiddlewareDone done;
  };

  // Everything after the identity, on the request's `view`. `taken` is the
  // completion when the identity took it already (a store lookup), else null.
  MiddlewareResult admit(RequestContext& ctx, const RequestView& view, const Identity& identity,
                         MiddlewareLater& later, MiddlewareDone* taken);
  // The limiter's answer, come later: concluded, and the request completed.
  void on_decided(RequestContext& ctx, PendingDecision pending, std::error_code ec,
                  RateDecision&& decision);
  // The limiter's answer (`ec`: it could not decide), come later or at once:
  // the route's failure mode, the outcome recorded and counted, the headers
  // queued. Continue, answer, or (a delay route, whose `pending.done` it
  // then takes) wait: kPending.
  MiddlewareResult conclude(RequestContext& ctx, PendingDecision& pending, std::error_code ec,
                            RateDecision&& decision);
  // The decision's counters: per limit, near the limit, local decisions.
  void count_decision(const RouteConfig& route, const std::vector<LimitDescriptor>& descriptors,
                      const RateDecision& decision, const RateOutcome& outcome);

  // Settles an admitted request's cost once its exchange has ended
  // (routes[].cost_from_response) on the limits it debited.
  void settle_at_end(RequestContext& ctx, const std::vector<LimitDescriptor>& descriptors,
                     const RateDecision& decision, double cost);
  // Tells the denial audit (the most-limited view, the denial stream) of a
  // denied request.
  void note_denial(RequestContext& ctx, const std::vector<LimitDescriptor>& descriptors,
                   const RateDecision& decision, const RateOutcome& outcome);
  // Gives the concurrency slots the local fallback admitted back to it when
  // the exchange ends.
  void hold_local_slots(RequestContext& ctx, const std::vector<LimitDescriptor>& descriptors,
                        const RateDecision& decision);
  // Holds the concurrency slots an admitted request took until its exchange ends.
  void hold_slots(RequestContext& ctx, const std::vector<LimitDescriptor>& descriptors,
                  const RateDecision& decision);
  // Continues after `seconds`, or refunds what the request debited and
  // completes at once when the client leaves first.
  void wait(DelayedRequest& delayed, double seconds, const RouteConfig& route, double cost,
            std::shared_ptr<std::vector<LimitDescriptor>> descriptors, RateDecision decision,
            MiddlewareDone done);

  // An emptied vector of an earlier request's descriptors, with its memory
  // (or a new one), shared as the completion and the limiter need it.
  std::shared_ptr<Descriptors> take_descriptors();
  // Keeps `held` for a later request once nothing else holds it (a
  // waiting request may), up to kSpareDescriptors.
  void give_back(std::shared_ptr<Descriptors> held);

  static constexpr std::size_t kSpareDescriptors = 64;

  Executor executor_;
  std::vector<std::shared_ptr<Descriptors>> spare_descriptors_;
  std::shared_ptr<RateLimiter> limiter_;
  MetricsShard& metrics_;
  DecisionCounters decision_counters_;
  SeriesCache local_decisions_;  // sluice_ratelimit_local_decisions_total by route and kind
  Histogram& check_duration_;
  std::shared_ptr<FallbackStore> fallback_;
  std::shared_ptr<ConsumerResolver> consumers_;
  std::shared_ptr<DenialAudit> audit_;
  std::shared_ptr<SlotKeeper> slots_;
  std::shared_ptr<Settler> settler_;
};

}  // namespace sluice
