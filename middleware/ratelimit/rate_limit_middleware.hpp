// The rate-limit middleware: builds the request's bucket descriptors from the
// route's limits, asks the RateLimiter, and either continues with the
// rate-limit headers queued for the response, answers 429, or applies the
// route's failure mode when the limiter cannot decide. Runs on the worker's
// executor; the limiter's completion arrives there too.
#pragma once

#include <memory>

#include <boost/asio/any_io_executor.hpp>

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
  RateLimitMiddleware(boost::asio::any_io_executor executor, std::shared_ptr<RateLimiter> limiter,
                      MetricsShard& metrics)
      : executor_(std::move(executor)), limiter_(std::move(limiter)), metrics_(metrics) {}

  void on_request(RequestContext& ctx, MiddlewareDone done) override;
  bool applies(const RequestContext& ctx) const override { return route_limits(*ctx.route); }

 private:
  boost::asio::any_io_executor executor_;
  std::shared_ptr<RateLimiter> limiter_;
  MetricsShard& metrics_;
};

// One JSON line per finished request to stdout, when log.access_log is on.
// Never logs API keys or other header values.
class AccessLogMiddleware final : public Middleware {
 public:
  explicit AccessLogMiddleware(boost::asio::any_io_executor executor)
      : executor_(std::move(executor)) {}
  void on_request(RequestContext& ctx, MiddlewareDone done) override;
  bool applies(const RequestContext&) const override { return false; }
  void on_complete(const Config& config, const ExchangeSummary& summary) override;

 private:
  boost::asio::any_io_executor executor_;
};

}  // namespace sluice
