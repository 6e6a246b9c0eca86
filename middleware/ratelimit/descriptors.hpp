// Rate-limit key extraction: which requests the limits refuse to key, the key
// value of each limit, and the bucket of each limit (its name and the hash of
// the key value). The API key (api_key.hpp) and query parameters
// (query_params.hpp) are read by their own modules. Pure functions, no I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "common/query_params.hpp"
#include "gateway/config/config.hpp"
#include "middleware/ratelimit/identity.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"
#include "middleware/ratelimit/request_view.hpp"

namespace sluice {

// Why the limits cannot key a request; such a request is refused with 400,
// before any limit is debited and before anything reaches the upstream.
struct KeyRefusal {
  enum class Reason {
    // A header or query parameter that a limit keys on appears more than once:
    // the limiter would key on one while the upstream receives them all.
    kDuplicateIdentity,
    // A limit keys on api_key, api_keys.header is Authorization and its value
    // is malformed (see extract_api_key).
    kMalformedAuthorization,
  };
  Reason reason = Reason::kDuplicateIdentity;
  std::string message;  // for the reply; names from the config only, never request data
};

// The refusal of a request by `limits` (a route's limits), if any. Only what
// the limits key on is looked at: api_keys.header for api_key, NAME for
// header:NAME (more than one line of it) and for query:NAME (more than one
// occurrence, names compared after form-decoding); `identity` is the request's.
std::optional<KeyRefusal> check_identity(const std::vector<const LimitConfig*>& limits,
                                         const RequestView& request, const ApiKeysConfig& api_keys,
                                         const Identity& identity);

// The name of a key source kind as the config writes it ("api_key", "ip",
// "path", "route", "global", "header", "query"): for metric labels and messages.
std::string_view key_source_name(KeySource::Kind kind);

// The address an ip key part holds: an IPv6 client's network of
// `ipv6_prefix` bits (the host bits zeroed), so that one host with a whole
// prefix to itself cannot mint a bucket per address; an IPv4 client (also
// when written IPv4-mapped) whole.
IpAddress ip_key_address(const IpAddress& client, unsigned ipv6_prefix);

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

// Builds the key value of one limit. An ip part is the client's
// ip_key_address under the limit's ipv6_prefix. A missing part (no API key,
// no such header or query parameter, or an empty value) is replaced by that
// same ip part,
// so a composite [api_key, path] falls back to [ip, path]. A header part is
// the first line of that header and a query part the first occurrence
// (check_identity refuses requests with more than one).
// `org`: the caller's organisation (org key parts); nullopt or empty: none.
LimitKeyValue limit_key_value(const LimitConfig& limit, const RequestView& request,
                              std::optional<std::string_view> api_key,
                              std::string_view org = {});
// The same, written into `into` (its strings' storage reused).
void limit_key_value(LimitKeyValue& into, const LimitConfig& limit, const RequestView& request,
                     std::optional<std::string_view> api_key, std::string_view org = {});

// The SHA-256 of the hash input, or with a secret its HMAC-SHA-256 under the
// secret (so a bucket cannot be traced back by hashing guesses), truncated to
// 128 bits.
KeyHash key_hash(std::string_view hash_input, std::string_view secret = {});

// key_hash for a limit's key value, as the descriptors are built: the same
// hash, kept by the worker thread for its last 64 values of at most 128 bytes
// (a kept-alive client sends the same value request after request).
KeyHash bucket_key_hash(std::string_view hash_input, std::string_view secret = {});

// The bucket of `limit` sized by `params` (its own, a plan's or a model's)
// for the key hash `hash`: its algorithm, a quota's periods around the
// store's time now, a concurrency limit's or a sliding log's slot, shadow and
// client headers as the limit says.
LimitDescriptor limit_descriptor(const LimitConfig& limit, const BucketParams& params,
                                 KeyHash hash);

// A bucket's name: limit name + ":" + the key hash as 32 lower-case hex digits.
std::string bucket_name(const LimitDescriptor& descriptor);
// The same name appended to `out`, and its length (to reserve for it).
void append_bucket_name(std::string& out, const LimitDescriptor& descriptor);
std::size_t bucket_name_size(const LimitDescriptor& descriptor);

// Whether a route has any limits: the one test of "does this route limit".
bool route_limits(const RouteConfig& route);

struct RateLimitKeys {
  std::optional<KeyRefusal> refusal;  // set: refuse the request; descriptors and values empty
  std::string plan;
  bool has_api_key = false;
  std::vector<LimitDescriptor> descriptors;  // one per route limit, in the route's order
  // Same order; hash_input cleared (metrics use the rest); inline for up to 4 limits.
  boost::container::small_vector<LimitKeyValue, 4> values;
};

// The descriptors of a request for `limits` (the route's limits, in order),
// with capacity and refill from LimitConfig::for_plan(plan); or the refusal of
// check_identity, and no descriptors. Key values are hashed under
// `key_secret` (see key_hash). `plan`, when given, is used instead of the
// identity's (an operator naming a bucket of another plan). The descriptors
// go into `reuse`, emptied first (its memory kept: a vector of an earlier
// request's).
RateLimitKeys build_limit_descriptors(const std::vector<const LimitConfig*>& limits,
                                      const RequestView& request, const ApiKeysConfig& api_keys,
                                      const Identity& identity, std::string_view key_secret = {},
                                      std::optional<std::string_view> plan = std::nullopt,
                                      std::vector<LimitDescriptor> reuse = {});

// The same for a route of `config` (its limit_indexes into config.limits),
// under config.redis.key_secret.
RateLimitKeys build_route_descriptors(const Config& config, const RouteConfig& route,
                                      const RequestView& request, const Identity& identity,
                                      std::vector<LimitDescriptor> reuse = {});

// `descriptors` with their quotas' periods worked out again at the store's
// time now, as building them does (a debit settled after its request's period
// ended counts in the period holding Redis' time then).
std::vector<LimitDescriptor> with_quota_periods_now(std::vector<LimitDescriptor> descriptors,
                                                    const Config& config);

}  // namespace sluice
