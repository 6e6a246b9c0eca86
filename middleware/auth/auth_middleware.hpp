// The authentication step of a route with `auth`: the request's JSON Web
// Token found (auth.jwt.from), verified against the providers (or found in
// this worker's cache of verified tokens, keyed by the token's SHA-256 and
// never kept past its exp), and the caller it names put in the request
// context: consumer, plan, the claims the configuration reads, and the
// forwarded claims for the upstream. A required route answers a missing or
// invalid token with 401 (RFC 6750's WWW-Authenticate, problem+json) before
// the limiter: no token spent, nothing sent upstream. An optional route lets
// a request without a token through, anonymous, and refuses a bad one.
// Synchronous; on the worker's executor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gateway/metrics.hpp"
#include "gateway/middleware.hpp"
#include "middleware/auth/token_cache.hpp"

namespace sluice {

class AuthMiddleware final : public Middleware {
 public:
  // `now_seconds`: the wall clock, seconds since the epoch (a token's exp is).
  AuthMiddleware(MetricsShard& metrics, std::function<std::int64_t()> now_seconds);
  MiddlewareResult on_request(RequestContext& ctx, MiddlewareLater& later) override;

  std::size_t cached() const { return cache_.size(); }

 private:
  MiddlewareResult refuse(const RequestContext& ctx, std::string_view reason,
                          std::string_view description, bool token_given);
  void admit(RequestContext& ctx, std::size_t provider,
             std::shared_ptr<const TokenCache::Claims> claims);

  MetricsShard& metrics_;
  std::function<std::int64_t()> now_seconds_;
  // The configuration the cached entries were verified under (a weak owner:
  // a configuration made later can never pass for it).
  std::weak_ptr<const Config> config_;
  TokenCache cache_;
  std::string query_token_;  // a token decoded from the query, reused
  // sluice_auth_tokens_total's series per provider of config_ (cached, then
  // verified), taken once per configuration: a cached token counts by a pointer.
  std::vector<std::pair<double*, double*>> token_series_;
  std::vector<std::uint64_t> generations_;  // per provider, reused
};

std::span<const MetricFamily> auth_metric_families();
void seed_auth_metrics(const Config& config, MetricsShard& metrics);

}  // namespace sluice
