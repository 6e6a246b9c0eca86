#include "middleware/auth/auth_middleware.hpp"

#include "common/ascii.hpp"
#include "common/cookies.hpp"
#include "common/query_params.hpp"
#include "common/target_parts.hpp"
#include "gateway/auth/jwks_source.hpp"
#include "gateway/tls/client_certificate.hpp"
#include "middleware/auth/jwt_verifier.hpp"

namespace sluice {
namespace {

constexpr MetricFamily kAuthFamilies[] = {
    {"sluice_auth_denied_total", "counter",
     "Requests refused with 401 by a route's auth, by route and reason (missing, too_large, "
     "malformed, algorithm, critical_header, unknown_issuer, unknown_key, signature, expired, "
     "not_yet_valid, audience)."},
    {"sluice_auth_tokens_total", "counter",
     "Tokens accepted, by provider and how (verified: checked now; cached: a token this worker "
     "verified before, still before its exp)."},
    {"sluice_auth_unknown_plan_total", "counter",
     "Verified tokens whose plan claim names no known plan, by provider: the default plan "
     "applied."},
};

constexpr std::string_view kDeniedReasons[] = {
    "missing",        "too_large",   "malformed", "algorithm",     "critical_header",
    "unknown_issuer", "unknown_key", "signature", "expired",       "not_yet_valid",
    "audience"};

// The token, where the configuration says to look; `ambiguous` when a place
// holds it twice (two Authorization lines).
struct Found {
  std::optional<std::string_view> token;  // views the request, or `decoded`
  bool ambiguous = false;
};

Found find_token(const RequestContext& ctx, const AuthConfig& auth, std::string& decoded) {
  Found found;
  for (const TokenSource& source : auth.token_from) {
    switch (source.kind) {
      case TokenSource::Kind::kBearer:
      case TokenSource::Kind::kHeader: {
        const auto value = ctx.header(source.name);
        if (!value) break;
        if (ctx.header_count(source.name) > 1) {
          found.ambiguous = true;
          return found;
        }
        std::string_view v = ascii::trim(*value);
        if (source.kind == TokenSource::Kind::kBearer) {
          if (v.size() < 7 || !ascii::iequals(v.substr(0, 7), "Bearer ")) break;  // Basic, ...
          v = ascii::trim(v.substr(7));
        }
        if (!v.empty()) found.token = v;
        break;
      }
      case TokenSource::Kind::kCookie:
        if (const auto cookies = ctx.header("Cookie")) {
          if (auto v = cookie_value(*cookies, source.name); v && !v->empty()) found.token = *v;
        }
        break;
      case TokenSource::Kind::kQuery:
        if (auto v = query_param(split_target(ctx.target).query, source.name); v && !v->empty()) {
          decoded = std::move(*v);
          found.token = decoded;
        }
        break;
    }
    if (found.token) return found;
  }
  return found;
}

const std::string* claim_of(const VerifiedCaller& caller, const std::string& path) {
  return path.empty() ? nullptr : caller.claim(path);
}

}  // namespace

std::span<const MetricFamily> auth_metric_families() { return kAuthFamilies; }

void seed_auth_metrics(const Config& config, MetricsShard& metrics) {
  for (const auto& route : config.routes) {
    if (route.auth == RouteAuth::kNone) continue;
    for (const auto reason : kDeniedReasons) {
      metrics.declare("sluice_auth_denied_total",
                      scratch_labels({{"route", route.name}, {"reason", reason}}));
    }
  }
  for (const auto& provider : config.auth.jwt) {
    for (const auto result : {"verified", "cached"}) {
      metrics.declare("sluice_auth_tokens_total",
                      scratch_labels({{"provider", provider.name}, {"result", result}}));
    }
    if (!provider.plan_claim.empty()) {
      metrics.declare("sluice_auth_unknown_plan_total",
                      scratch_labels({{"provider", provider.name}}));
    }
  }
}

AuthMiddleware::AuthMiddleware(MetricsShard& metrics, std::function<std::int64_t()> now_seconds)
    : metrics_(metrics), now_seconds_(std::move(now_seconds)) {}

MiddlewareResult AuthMiddleware::refuse(const RequestContext& ctx, std::string_view reason,
                                        std::string_view description, bool token_given) {
  metrics_.add("sluice_auth_denied_total",
               scratch_labels({{"route", ctx.route->name}, {"reason", reason}}));
  LocalReply reply;
  reply.status = 401;
  reply.content_type = "application/problem+json";
  reply.body = R"({"type":"about:blank","title":"Unauthorized","status":401,"detail":")";
  reply.body += token_given ? description : "a bearer token is required";
  reply.body += "\"}";
  // RFC 6750: no error code when no credentials came at all.
  std::string challenge = R"(Bearer realm="sluice")";
  if (token_given) {
    challenge += R"(, error="invalid_token", error_description=")";
    challenge += description;
    challenge += '"';
  }
  reply.headers.emplace_back("WWW-Authenticate", std::move(challenge));
  reply.headers.emplace_back("Cache-Control", "no-store");
  return MiddlewareResult::respond(std::move(reply));
}

void AuthMiddleware::admit(RequestContext& ctx, std::size_t provider_index,
                           std::shared_ptr<const TokenCache::Claims> claims) {
  const Config& config = *ctx.config;
  const JwtProvider& provider = config.auth.jwt[provider_index];
  VerifiedCaller& caller = ctx.caller;
  caller.verified = true;
  caller.claims = std::move(claims);
  if (const auto* consumer = claim_of(caller, provider.consumer_claim)) caller.consumer = *consumer;
  if (const auto* plan = claim_of(caller, provider.plan_claim)) {
    if (is_known_plan(config, *plan)) {
      caller.plan = *plan;
    } else {
      caller.plan = config.api_keys.default_plan;
      metrics_.add("sluice_auth_unknown_plan_total", scratch_labels({{"provider", provider.name}}));
    }
  }
  if (const auto* org = claim_of(caller, provider.org_claim)) caller.org = *org;
  for (const auto& [path, header] : provider.forward_claims) {
    if (const auto* value = claim_of(caller, path)) ctx.identity_headers.emplace_back(header, *value);
  }
}

// A verified client certificate: the consumer it names, and what goes upstream.
void take_certificate(RequestContext& ctx) {
  const ClientCertificate* cert = ctx.client_cert;
  if (!cert || !ctx.config->server.tls) return;
  const TlsConfig& tls = *ctx.config->server.tls;
  if (!tls.client_consumer.empty()) {
    if (const auto consumer = cert->field(tls.client_consumer)) {
      ctx.caller.verified = true;
      ctx.caller.consumer = *consumer;
    }
  }
  switch (tls.forward_client_cert) {
    case TlsConfig::ForwardCert::kNone:
      break;
    case TlsConfig::ForwardCert::kXfcc:
      ctx.identity_headers.emplace_back("X-Forwarded-Client-Cert", cert->xfcc);
      break;
    case TlsConfig::ForwardCert::kHeaders:
      for (const auto& [name, field] : {std::pair{"X-Client-Cert-Subject", "subject"},
                                        std::pair{"X-Client-Cert-San-Uri", "san_uri"},
                                        std::pair{"X-Client-Cert-San-Dns", "san_dns"},
                                        std::pair{"X-Client-Cert-Fingerprint", "fingerprint"}}) {
        if (const auto value = cert->field(field)) ctx.identity_headers.emplace_back(name, *value);
      }
      break;
  }
}

MiddlewareResult AuthMiddleware::on_request(RequestContext& ctx, MiddlewareLater&) {
  const RouteConfig* route = ctx.route;
  if (!route) return MiddlewareResult::next();
  take_certificate(ctx);
  if (route->auth == RouteAuth::kNone) return MiddlewareResult::next();
  const AuthConfig& auth = ctx.config->auth;
  if (config_.owner_before(ctx.config) || ctx.config.owner_before(config_)) {
    cache_.clear();  // verified under other providers: forgotten
    config_ = ctx.config;
    token_series_.clear();
    for (const auto& provider : auth.jwt) {
      token_series_.emplace_back(
          &metrics_.value_ref("sluice_auth_tokens_total",
                              scratch_labels({{"provider", provider.name}, {"result", "cached"}})),
          &metrics_.value_ref("sluice_auth_tokens_total",
                              scratch_labels({{"provider", provider.name}, {"result", "verified"}})));
    }
  }
  const Found found = find_token(ctx, auth, query_token_);
  if (found.ambiguous) return refuse(ctx, "malformed", "more than one token header", true);
  if (!found.token) {
    if (route->auth == RouteAuth::kOptional) return MiddlewareResult::next();
    return refuse(ctx, "missing", "", false);
  }
  const std::string_view token = *found.token;
  if (token.size() > auth.max_token_bytes) {
    return refuse(ctx, "too_large", "the token is too large", true);
  }
  const std::int64_t now = now_seconds_();
  const TokenCache::Digest digest = cache_.digest(token);
  if (const TokenCache::Entry* cached = cache_.find(digest)) {
    const JwtProvider& cached_by = auth.jwt[cached->provider];
    const bool same_keys =
        !cached_by.jwks || cached_by.jwks->generation() == cached->keys_generation;
    if (cached->expires_at > now && same_keys) {
      *token_series_[cached->provider].first += 1;
      admit(ctx, cached->provider, cached->claims);
      return MiddlewareResult::next();
    }
    cache_.erase(digest);
  }
  // The generations of the URL providers' keys before verifying: a token
  // verified just as new keys came is checked again at its next use.
  generations_.clear();
  for (const auto& provider : auth.jwt) {
    generations_.push_back(provider.jwks ? provider.jwks->generation() : 0);
  }
  JwtVerified verified = verify_jwt(token, auth, now);
  if (verified.error != JwtError::kNone) {
    return refuse(ctx, jwt_error_reason(verified.error), jwt_error_description(verified.error),
                  true);
  }
  *token_series_[verified.provider].second += 1;
  auto claims = std::make_shared<const TokenCache::Claims>(std::move(verified.claims));
  // Kept until exp at the latest (the skew is not granted twice).
  cache_.insert(digest,
                {verified.expires_at, verified.provider, generations_[verified.provider], claims},
                auth.cache_max_entries);
  admit(ctx, verified.provider, std::move(claims));
  return MiddlewareResult::next();
}

}  // namespace sluice
