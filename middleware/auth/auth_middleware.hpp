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

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

#include "gateway/metrics.hpp"
#include "gateway/middleware.hpp"

namespace sluice {

class AuthMiddleware final : public Middleware {
 public:
  // `now_seconds`: the wall clock, seconds since the epoch (a token's exp is).
  AuthMiddleware(MetricsShard& metrics, std::function<std::int64_t()> now_seconds);
  MiddlewareResult on_request(RequestContext& ctx, MiddlewareLater& later) override;

  std::size_t cached() const { return entries_.size(); }

 private:
  // A token's SHA-256: the cache's key (the token itself is not kept).
  using Digest = std::array<unsigned char, 32>;
  struct DigestHash {
    std::size_t operator()(const Digest& d) const {
      std::size_t h = 0;
      std::memcpy(&h, d.data(), sizeof h);  // a digest's bytes are spread already
      return h;
    }
  };
  struct Entry {
    std::int64_t expires_at = 0;
    std::size_t provider = 0;
    std::uint64_t keys_generation = 0;  // a jwks_url provider's keys it was verified with
    std::vector<std::pair<std::string, std::string>> claims;
    std::list<Digest>::iterator order;
  };

  MiddlewareResult refuse(const RequestContext& ctx, std::string_view reason,
                          std::string_view description, bool token_given);
  void admit(RequestContext& ctx, std::size_t provider,
             const std::vector<std::pair<std::string, std::string>>& claims);
  void remember(const Digest& digest, std::int64_t expires_at, std::size_t provider,
                std::uint64_t keys_generation,
                const std::vector<std::pair<std::string, std::string>>& claims,
                std::size_t max_entries);

  MetricsShard& metrics_;
  std::function<std::int64_t()> now_seconds_;
  // The configuration the cached entries were verified under (a weak owner:
  // a configuration made later can never pass for it).
  std::weak_ptr<const Config> config_;
  std::unordered_map<Digest, Entry, DigestHash> entries_;
  std::list<Digest> order_;  // least recently used first
  std::string query_token_;  // a token decoded from the query, reused
  // sluice_auth_tokens_total's series per provider of config_ (cached, then
  // verified), taken once per configuration: a cached token counts by a pointer.
  std::vector<std::pair<double*, double*>> token_series_;
  std::vector<std::uint64_t> generations_;  // per provider, reused
};

std::span<const MetricFamily> auth_metric_families();
void seed_auth_metrics(const Config& config, MetricsShard& metrics);

}  // namespace sluice
