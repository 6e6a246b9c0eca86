// The limiter's own errors (an open circuit breaker, a script reply of
// another shape), and which errors certainly kept a call from Redis. Redis'
// own errors come from redis::category().
#pragma once

#include <system_error>

namespace sluice {

// Errors of the limiter itself (Redis errors come from redis::category()).
// kPartlyApplied: a refund sent as several calls (one per hash slot) of which
// some were applied and others never reached Redis; sent again, the applied
// ones would count twice.
enum class LimiterError { kCircuitOpen = 1, kBadReply, kPartlyApplied };
std::error_code make_error_code(LimiterError e) noexcept;

// Whether a call that failed with `ec` certainly never reached Redis (not
// connected, the connection could not be made, an open breaker), so that it
// may be sent again without being applied twice. A timeout, a lost connection
// or an error reply may come after Redis ran it.
bool never_reached_redis(std::error_code ec) noexcept;

}  // namespace sluice

namespace std {
template <>
struct is_error_code_enum<sluice::LimiterError> : true_type {};
}  // namespace std
