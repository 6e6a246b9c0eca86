// The first step of a request: who may reach the route (ip_access, the
// global list and then the route's, on the client address trusted_proxies
// resolve) and, on a route with cors, the preflight answered here and the
// Access-Control-* headers queued for the response. A refused client gets 403
// problem+json; neither a refusal nor a preflight reaches the limiter or the
// upstream. Synchronous; called on the worker's executor.
#pragma once

#include <span>

#include "gateway/metrics.hpp"
#include "gateway/middleware.hpp"

namespace sluice {

class AccessMiddleware final : public Middleware {
 public:
  explicit AccessMiddleware(MetricsShard& metrics) : metrics_(metrics) {}
  MiddlewareResult on_request(RequestContext& ctx, MiddlewareLater& later) override;

 private:
  MiddlewareResult refuse(const RequestContext& ctx, std::string_view reason,
                          std::string_view detail);

  MetricsShard& metrics_;
};

// The families this step counts, and their zero series for a config.
std::span<const MetricFamily> access_metric_families();
void seed_access_metrics(const Config& config, MetricsShard& metrics);

}  // namespace sluice
