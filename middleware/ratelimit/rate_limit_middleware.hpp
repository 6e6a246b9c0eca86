// The rate-limit middleware: builds the request's bucket descriptors from the
// route's limits, asks the RateLimiter, and either continues with the
// rate-limit headers queued for the response, answers 429, or applies the
// route's failure mode when the limiter cannot decide. Runs on the worker's
// executor; the limiter's completion arrives there too.
#pragma once

#include <memory>

#include "gateway/middleware.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

class MetricsShard;

// Retry-After of a fail-closed 503: the limiter's expected unavailable time in
// whole seconds, rounded up, at least 1.
long unavailable_retry_after(const RateDecision& decision);

// A zero series for every label combination the rate-limit middleware and the
// Redis limiter can count under `config`: decisions per route, limit and
// decision; fail-open or fail-closed per route (by its failure mode); missing
// key sources and refusal reasons the route's limits make possible; Redis
// errors by kind; the decision latency histogram. Startup and reload only.
void seed_rate_limit_metrics(const Config& config, MetricsShard& metrics);

class RateLimitMiddleware final : public Middleware,
                                  public std::enable_shared_from_this<RateLimitMiddleware> {
 public:
  RateLimitMiddleware(std::shared_ptr<RateLimiter> limiter, MetricsShard& metrics)
      : limiter_(std::move(limiter)), metrics_(metrics) {}

  // Continues at once for a route without limits, answers at once a request
  // whose key sources are refused, and otherwise completes when the limiter does.
  MiddlewareResult on_request(RequestContext& ctx, MiddlewareLater& later) override;

 private:
  std::shared_ptr<RateLimiter> limiter_;
  MetricsShard& metrics_;
};

}  // namespace sluice
