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
// The end of the period that holds `now_us` of the two the gateway sent:
// [start, end) or [end, next_end); NaN when neither holds it (the script
// refuses such a call).
double quota_period_end(const QuotaPeriods& periods, std::int64_t now_us);

// A quota's units used in its period, and that period's end. Stored in a
// BucketState as tokens = used, timestamp_us = the period's end; a stored
// period counts when it is the one holding now, or the one after it while
// now is within a second of its start (the store's clock stepped back); any
// other counts as none.
struct QuotaUsage {
  double used = 0;
  double end_us = 0;
};
QuotaUsage quota_usage(const BucketState& state, const QuotaPeriods& periods, std::int64_t now_us);

// The expiry of a quota's key, in milliseconds, as the script sets it: a
// second after its period ends.
std::int64_t quota_ttl_ms(double end_us, std::int64_t now_us);

}  // namespace sluice
