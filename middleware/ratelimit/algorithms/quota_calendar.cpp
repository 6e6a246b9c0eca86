#include "middleware/ratelimit/algorithms/quota_calendar.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include <date/tz.h>

namespace sluice {
namespace {

using std::chrono::duration_cast;
using Micros = std::chrono::microseconds;
using SysUs = date::sys_time<Micros>;
using LocalUs = date::local_time<Micros>;

struct Span {
  SysUs begin;
  SysUs end;
};

// The zone's offset at `t`, and the span of time it holds for (the whole
// time line for a fixed offset).
struct OffsetAt {
  Micros offset{0};
  SysUs begin = SysUs::min();
  SysUs end = SysUs::max();
};

OffsetAt offset_at(const TimeZone& zone, SysUs t) {
  if (zone.zone == nullptr)
    return {duration_cast<Micros>(std::chrono::minutes(zone.offset_minutes))};
  const date::sys_info info = zone.zone->get_info(t);
  return {duration_cast<Micros>(info.offset), SysUs(info.begin), SysUs(info.end)};
}

// The instant a local time names: a skipped one at the change, a repeated
// one at its first occurrence.
SysUs to_sys(const TimeZone& zone, LocalUs local) {
  if (zone.zone == nullptr) {
    return SysUs(local.time_since_epoch() - std::chrono::minutes(zone.offset_minutes));
  }
  return zone.zone->to_sys(local, date::choose::earliest);
}

template <class Unit>
Span clock_period(const TimeZone& zone, SysUs t) {
  const OffsetAt at = offset_at(zone, t);
  const LocalUs local{t.time_since_epoch() + at.offset};
  const LocalUs start = date::floor<Unit>(local);
  SysUs begin{start.time_since_epoch() - at.offset};
  SysUs end = begin + Unit{1};
  return {std::max(begin, at.begin), std::min(end, at.end)};
}

Span calendar_period(CalendarPeriod period, const TimeZone& zone, SysUs t) {
  const OffsetAt at = offset_at(zone, t);
  const date::local_days day = date::floor<date::days>(LocalUs{t.time_since_epoch() + at.offset});
  date::local_days first = day;
  date::local_days next = day + date::days{1};
  switch (period) {
    case CalendarPeriod::kWeek: {
      const date::weekday wd{day};
      first = day - date::days{wd.iso_encoding() - 1};
      next = first + date::days{7};
      break;
    }
    case CalendarPeriod::kMonth: {
      const date::year_month_day ymd{day};
      const date::year_month start = ymd.year() / ymd.month();
      first = date::local_days{start / 1};
      next = date::local_days{(start + date::months{1}) / 1};
      break;
    }
    case CalendarPeriod::kYear: {
      const date::year y = date::year_month_day{day}.year();
      first = date::local_days{y / 1 / 1};
      next = date::local_days{(y + date::years{1}) / 1 / 1};
      break;
    }
    default:
      break;
  }
  return {to_sys(zone, LocalUs{first}), to_sys(zone, LocalUs{next})};
}

Span period_at(CalendarPeriod period, const TimeZone& zone, SysUs t) {
  switch (period) {
    case CalendarPeriod::kSecond:
      return clock_period<std::chrono::seconds>(zone, t);
    case CalendarPeriod::kMinute:
      return clock_period<std::chrono::minutes>(zone, t);
    case CalendarPeriod::kHour:
      return clock_period<std::chrono::hours>(zone, t);
    default:
      return calendar_period(period, zone, t);
  }
}

double micros_of(SysUs t) {
  return static_cast<double>(t.time_since_epoch().count());
}

}  // namespace

QuotaPeriods calendar_periods(CalendarPeriod period, const TimeZone& zone, std::int64_t now_us) {
  const Span now = period_at(period, zone, SysUs{Micros{now_us}});
  const Span next = period_at(period, zone, now.end);
  return {micros_of(now.begin), micros_of(now.end), micros_of(next.end)};
}

QuotaPeriods current_periods(const LimitConfig& limit, std::int64_t store_now_us) {
  const std::int64_t now_us = store_now_us - quota_lookback_us(limit.period);
  struct Remembered {
    const LimitConfig* limit = nullptr;
    CalendarPeriod period{};
    const date::time_zone* zone = nullptr;
    int offset_minutes = 0;
    QuotaPeriods periods;
  };
  // A few quotas per thread; the oldest entry makes room.
  thread_local std::array<Remembered, 8> remembered;
  thread_local std::size_t next_slot = 0;
  const double now = static_cast<double>(now_us);
  for (const Remembered& r : remembered) {
    if (r.limit == &limit && r.period == limit.period && r.zone == limit.timezone.zone &&
        r.offset_minutes == limit.timezone.offset_minutes && now >= r.periods.start_us &&
        now < r.periods.end_us) {
      return r.periods;
    }
  }
  const QuotaPeriods periods = calendar_periods(limit.period, limit.timezone, now_us);
  remembered[next_slot] =
      Remembered{&limit, limit.period, limit.timezone.zone, limit.timezone.offset_minutes, periods};
  next_slot = (next_slot + 1) % remembered.size();
  return periods;
}

}  // namespace sluice
