// Rate-limit key extraction (spec sections 2 and 3): which API key and plan a
// request carries, the key value of each limit, and the Redis key of each
// bucket. Pure functions, no I/O (style.md habit 4).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/config.hpp"
#include "middleware/rate_limiter.hpp"

namespace sluice {

// Looks a request header up by name (case-insensitive); nullopt when absent.
using HeaderLookup = std::function<std::optional<std::string_view>(std::string_view name)>;

// What key extraction sees of a request. The views must outlive the calls.
struct RequestView {
  std::string_view method;
  std::string_view path;   // without the query string
  std::string_view query;  // after '?', without it; empty when none
  HeaderLookup header;     // may be empty: no headers
  IpAddress client_ip;
  std::string_view route;  // the matched route's name
};

// API keys longer than this count as missing.
inline constexpr std::size_t kMaxApiKeyBytes = 256;

struct ApiKey {
  std::optional<std::string_view> key;  // nullopt: missing (absent, too long, or not a consumer)
  std::string_view plan;                // the consumer's plan, else default_plan (views `config`)
};

// Reads the API key from the configured header. For "Authorization" the
// token after "Bearer " (scheme case-insensitive) is the key. When consumers
// are listed, an unlisted key counts as missing.
ApiKey extract_api_key(const RequestView& request, const ApiKeysConfig& config);

// The value of query parameter `name` (percent-decoded; the first occurrence
// wins; names are compared after percent-decoding); nullopt when absent.
std::optional<std::string> query_param(std::string_view query, std::string_view name);

// Decodes %XX escapes; a malformed escape is kept as it is. '+' is kept.
std::string percent_decode(std::string_view text);

// The value a limit's bucket is keyed by, as the input of the hash: every
// part tagged with its source kind (and header/query name) and length-prefixed,
// so parts cannot run together and "ip" 1.2.3.4 never equals a header
// "1.2.3.4". It holds raw request data: hash it, never write it anywhere.
struct LimitKeyValue {
  std::string hash_input;
  bool fell_back = false;  // a source was missing and the client IP was used in its place
  KeySource::Kind missing_kind = KeySource::Kind::kIp;  // the first missing source, if fell_back
  std::string missing_name;  // its header/query name from the config (never request data)
};

// Builds the key value of one limit. A missing part (no API key, no such
// header or query parameter, or an empty value) is replaced by the client IP,
// so a composite [api_key, path] falls back to [ip, path].
LimitKeyValue limit_key_value(const LimitConfig& limit, const RequestView& request,
                              std::optional<std::string_view> api_key);

// key_prefix + limit name + ":" + 32 lower-case hex digits (SHA-256 of the
// hash input, truncated to 128 bits).
std::string bucket_redis_key(std::string_view key_prefix, std::string_view limit_name,
                             std::string_view hash_input);

struct RateLimitKeys {
  std::string plan;
  bool has_api_key = false;
  std::vector<LimitDescriptor> descriptors;  // one per route limit, in the route's order
  std::vector<LimitKeyValue> values;  // same order; hash_input cleared (metrics use the rest)
};

// The descriptors of a request for `limits` (the route's limits, in order),
// with capacity and refill from LimitConfig::for_plan(plan).
RateLimitKeys build_limit_descriptors(const std::vector<const LimitConfig*>& limits,
                                      const RequestView& request, const ApiKeysConfig& api_keys,
                                      std::string_view key_prefix);

// The same for a route of `config` (its limit_indexes into config.limits).
RateLimitKeys build_route_descriptors(const Config& config, const RouteConfig& route,
                                      const RequestView& request);

}  // namespace sluice
