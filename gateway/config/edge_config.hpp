// The configuration of what stands before the limiter and what clients see
// of it: exemptions, IP lists (ip_access),
// CORS (routes[].cors), JSON Web Token providers (auth.jwt) and a route's
// auth, client_headers. Plain structs, as the rest of config.hpp; included by it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/client_ip.hpp"
#include "gateway/ip_prefix_table.hpp"

namespace sluice {

// Which rate-limit headers a client is shown (limits.NAME.client_headers and
// routes[].client_headers): all, none, the IETF RateLimit and
// RateLimit-Policy only, or the X-RateLimit-* trio only. A hidden limit still
// decides and is logged; a 429 it alone causes carries Retry-After only.
enum class ClientHeaders : std::uint8_t { kAll, kNone, kIetf, kLegacy };

// Clients whose requests skip rate limiting altogether (and are counted).
struct ExemptionsConfig {
  std::vector<Cidr> client_cidrs;  // the resolved client address (after trusted proxies)
  std::vector<std::string> plans;  // API-key plans
};

struct JwkSet;      // gateway/auth/jwk_set.hpp
class JwksSource;  // gateway/auth/jwks_source.hpp

// auth.jwt.providers[]: an issuer of the JSON Web Tokens routes accept. A
// token is matched to its provider by its "iss" claim.
struct JwtProvider {
  std::string name;
  std::string issuer;
  std::vector<std::string> audiences;  // empty: "aud" is not checked
  std::string jwks_file;
  std::shared_ptr<const JwkSet> keys;  // from jwks_file; null with a secret or a URL
  std::shared_ptr<JwksSource> jwks;    // jwks_url's keys as last fetched
  std::string secret_file;             // HS256/384/512, never beside a JWKS
  std::string secret;
  // The algorithms accepted (JwsAlgorithm values); empty: every one its keys
  // (or its secret) can verify.
  std::vector<std::uint8_t> algorithms;
  std::int64_t clock_skew_seconds = 60;  // leeway for exp, nbf and iat
  std::string consumer_claim;  // a claim path naming the consumer; empty: none
  std::string plan_claim;      // a claim path naming the plan; empty: none
  std::string org_claim;       // a claim path naming the organisation; empty: none
  // Claim path -> the request header it is sent upstream in.
  std::vector<std::pair<std::string, std::string>> forward_claims;
};

// Where a request's token is looked for, in order.
struct TokenSource {
  enum class Kind : std::uint8_t { kBearer, kHeader, kCookie, kQuery };
  Kind kind = Kind::kBearer;
  std::string name;  // the header (Authorization for kBearer), cookie or query parameter
};

struct AuthConfig {
  std::vector<JwtProvider> jwt;
  std::vector<TokenSource> token_from;  // default: Authorization: Bearer
  std::size_t max_token_bytes = 8192;
  std::size_t cache_max_entries = 10000;  // verified tokens kept per worker
  // Every claim path the configuration reads (limit keys jwt:PATH, the
  // providers' consumer, plan and forwarded claims), each once: a verified
  // token's values are kept for these only.
  std::vector<std::string> claim_paths;
  std::vector<std::string> forwarded_headers;  // every forward_claims header, each once
};

// routes[].auth: whether a request needs a verified token.
enum class RouteAuth : std::uint8_t { kNone, kOptional, kRequired };

// Client addresses let in or kept out (ip_access, for all routes and per
// route), on the address trusted_proxies resolve. The longest listed prefix
// holding the address decides; an address no entry holds is let in unless
// the list allows some (then only those are).
struct IpAccessConfig {
  std::shared_ptr<const IpPrefixTable> table;  // null: no list
  bool has_allow = false;                      // some entry is an allow entry
  bool has_deny = false;                       // some entry is a deny entry
  enum class Result { kAllowed, kDenied, kNotAllowed };
  Result check(const IpAddress& ip) const;
  bool empty() const { return !table; }
};

// Cross-origin requests from browsers (routes[].cors): preflights answered by
// the gateway, the Access-Control-* headers on every response of the route.
struct CorsConfig {
  bool enabled = false;
  bool any_origin = false;  // "*" among the origins
  std::vector<std::string> origins;  // exact, lower case: "https://app.example.com"
  // "https://*.example.com": the scheme with "://" and the suffix from the dot.
  struct Wildcard {
    std::string scheme;  // "https://"
    std::string suffix;  // ".example.com" (with ":port" when one was written)
  };
  std::vector<Wildcard> wildcards;
  std::string allow_methods;   // comma-separated, as sent
  std::string allow_headers;   // comma-separated; empty: the preflight's own list is echoed
  std::string expose_headers;  // comma-separated, the rate-limit headers first
  bool allow_credentials = false;
  std::optional<std::int64_t> max_age;  // seconds; none: no Access-Control-Max-Age
  // Whether `origin` (as the Origin header carries it) may read responses.
  bool allows(std::string_view origin) const;
};

}  // namespace sluice
