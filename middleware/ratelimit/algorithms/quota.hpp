// A quota: at most `capacity` units per calendar period of a time zone
// (quota_calendar.hpp), all given back when the period ends. The pure C++
// twin of the quota section of decide_limits.lua: the same arithmetic in the
// same order of floating-point operations (a component test checks bit for
// bit), for the unit tests and the local fallback.
#pragma once

#include <cstdint>

#include "middleware/ratelimit/algorithms/token_bucket.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {
// The end of the period that holds `now_us`, given the gateway's periods:
// before start_us the one that ends there; then [start, end), [end,
// next_end); past next_end as many periods of length next_end - end as it
// takes (a gateway clock a whole period behind the store's).
double quota_period_end(const QuotaPeriods& periods, std::int64_t now_us);

// A quota's units used in its period, and that period's end. Stored in a
// BucketState as tokens = used, timestamp_us = the period's end; a stored
// period that has ended counts as none, a later one is kept (the clock went
// back).
struct QuotaUsage {
  double used = 0;
  double end_us = 0;
};
QuotaUsage quota_usage(const BucketState& state, const QuotaPeriods& periods, std::int64_t now_us);

// The expiry of a quota's key, in milliseconds, as the script sets it: a
// second after its period ends.
std::int64_t quota_ttl_ms(double end_us, std::int64_t now_us);

}  // namespace sluice
