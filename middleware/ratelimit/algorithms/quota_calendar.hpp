// A quota's calendar: the periods (a second, minute, hour, day, ISO week from
// Monday, month or year) of a time zone around an instant. The gateway
// computes them around its estimate of Redis' time (a second before it, so
// that the two periods also hold Redis' time when the estimate is a little
// ahead) and hands them to the script, which counts in the one holding Redis'
// time (quota.hpp).
//
// Periods follow the zone's clock. A day, week, month or year starts at the
// local midnight that begins it; a midnight that the clock skips starts it at
// the change, one that happens twice at its first occurrence, so a day is 23,
// 24 or 25 hours long (23.5 or 24.5 on Lord Howe Island). A minute or an hour
// is one of the local clock, cut where the zone's offset changes: periods
// never overlap and leave no gap.
#pragma once

#include <cstdint>

#include "gateway/config/config.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

// The period of `period` in `zone` that holds `now_us` (microseconds since
// the epoch), and the end of the one after it.
QuotaPeriods calendar_periods(CalendarPeriod period, const TimeZone& zone, std::int64_t now_us);

// How far before the estimate of the store's time current_periods() looks:
// a second, or half of one for periods of a second (whose two periods then
// hold the store's time while the estimate is within 0.5 s of it, ahead or
// behind; further off, the call is refused as one Redis cannot decide).
inline constexpr std::int64_t kQuotaLookbackUs = 1'000'000;
constexpr std::int64_t quota_lookback_us(CalendarPeriod period) {
  return period == CalendarPeriod::kSecond ? kQuotaLookbackUs / 2 : kQuotaLookbackUs;
}

// calendar_periods() of a configured quota at `store_now_us` -
// quota_lookback_us(), remembered by each thread until the period ends (a zone's
// rules cost a search each).
QuotaPeriods current_periods(const LimitConfig& limit, std::int64_t store_now_us);

}  // namespace sluice
