// Rate-limit response headers and bodies: a pure function
// of the route's limits, the request's cost and the limiter's decision.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/header_list.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

inline constexpr std::string_view kProblemJsonContentType = "application/problem+json";

// The limit the X-RateLimit-* headers describe: the fewest remaining tokens
// relative to capacity (the first on a tie). On a denial only the limits whose
// bucket was insufficient compete, so a 429 never shows a limit with tokens
// to spare. Returns limits.size() when there are none.
std::size_t most_restrictive_limit(std::span<const LimitDescriptor> limits,
                                   const RateDecision& decision);
// The same choice among the limits `competes(index)` admits.
std::size_t most_restrictive_of(std::span<const LimitDescriptor> limits,
                                const RateDecision& decision,
                                const std::function<bool(std::size_t)>& competes);

// Every rate-limit header for a limited route, in this order:
//   X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset,
//   RateLimit-Policy ("name";q=C;w=ceil(C/R), ...),
//   RateLimit ("name";r=floor(remaining);t=ceil(seconds until cost tokens), ...),
// and on a denial also Retry-After and Cache-Control: no-store. (Content-Type
// of the 429 is kProblemJsonContentType, left to the reply builder.)
// Empty when there are no limits. `limits` and decision.limits are parallel.
// `cost` is already folded into LimitState::seconds_to_cost by the limiter.
// `t` follows the spec's definition (0 when cost tokens are available now);
// the spec's example line shows t=1 for a first request, which would be
// seconds-until-full: the definition is followed where the two differ.
HeaderList rate_limit_headers(std::span<const LimitDescriptor> limits, double cost,
                              const RateDecision& decision);
// The same headers appended to `out`, each value written into the string the
// list keeps for it (no allocation once a reused list has held them).
void append_rate_limit_headers(HeaderList& out, std::span<const LimitDescriptor> limits,
                               double cost, const RateDecision& decision);

// Seconds until every violated limit has `cost` tokens (0 when none is violated).
double retry_after_seconds(std::span<const LimitDescriptor> limits, const RateDecision& decision);

// The 429 problem+json body (one line, no trailing newline):
// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//  "title":"Too Many Requests","status":429,"violated-policies":[...],"retry_after_ms":N}
// `status` is the status the reply goes with (a route's reject.status).
std::string too_many_requests_body(std::span<const LimitDescriptor> limits,
                                   const RateDecision& decision, unsigned status = 429);

// The 503 problem+json body for on_redis_failure: closed.
std::string rate_limit_unavailable_body();

// A structured-field sf-string: quoted, with '"' and '\' escaped. Bytes that
// an sf-string cannot hold (controls, non-ASCII) become '?'.
std::string sf_string(std::string_view text);

// Rounding used by the headers: whole seconds up, whole tokens down, with a
// tolerance of 1e-9 for float noise (49.999999999999993 tokens are 50), and
// clamped to [0, kMaxHeaderSeconds] (an infinite wait shows as the maximum).
inline constexpr std::int64_t kMaxHeaderSeconds = 1'000'000'000;
std::int64_t ceil_seconds(double seconds);
std::int64_t floor_tokens(double tokens);

}  // namespace sluice
