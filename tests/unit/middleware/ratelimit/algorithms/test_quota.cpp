// Quotas: the calendar at fixed instants (daylight-saving days of 23 and 25
// hours, half-hour offsets and changes, a skipped midnight, leap years, ISO
// weeks), the script's choice of period by the store's clock, and the twin's
// decisions with a manual clock.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <limits>
#include <string>
#include <vector>

#include "gateway/config/time_zone.hpp"
#include "middleware/ratelimit/algorithms/limits.hpp"
#include "middleware/ratelimit/algorithms/quota_calendar.hpp"

namespace quota_test {

using sluice::CalendarPeriod;
using sluice::QuotaPeriods;

constexpr std::int64_t kSecond = 1'000'000;

// "2026-11-28T13:00:00Z" in microseconds since the epoch.
std::int64_t at(const char* text) {
  std::tm tm{};
  REQUIRE(std::sscanf(text, "%d-%d-%dT%d:%d:%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                      &tm.tm_min, &tm.tm_sec) == 6);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<std::int64_t>(timegm(&tm)) * kSecond;
}

sluice::TimeZone zone(const char* name) {
  std::string error;
  auto tz = sluice::parse_time_zone(name, error);
  INFO(error);
  REQUIRE(tz);
  return *tz;
}

struct Expected {
  const char* start;
  const char* end;
  const char* next_end;
};

void check_periods(CalendarPeriod period, const char* tz, const char* now, Expected e) {
  CAPTURE(tz, now);
  const QuotaPeriods p = sluice::calendar_periods(period, zone(tz), at(now));
  CHECK(p.start_us == static_cast<double>(at(e.start)));
  CHECK(p.end_us == static_cast<double>(at(e.end)));
  CHECK(p.next_end_us == static_cast<double>(at(e.next_end)));
}

TEST_CASE("quota calendar: UTC periods, ISO weeks and leap years", "[quota][unit]") {
  check_periods(CalendarPeriod::kMinute, "UTC", "2026-11-28T13:05:59Z",
                {"2026-11-28T13:05:00Z", "2026-11-28T13:06:00Z", "2026-11-28T13:07:00Z"});
  check_periods(CalendarPeriod::kHour, "UTC", "2026-11-28T23:59:59Z",
                {"2026-11-28T23:00:00Z", "2026-11-29T00:00:00Z", "2026-11-29T01:00:00Z"});
  check_periods(CalendarPeriod::kDay, "UTC", "2026-12-31T12:00:00Z",
                {"2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z"});
  // 2026-11-28 is a Saturday: its ISO week began on Monday the 23rd.
  check_periods(CalendarPeriod::kWeek, "UTC", "2026-11-28T13:00:00Z",
                {"2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"});
  // A Monday at midnight begins its own week; a Sunday ends one.
  check_periods(CalendarPeriod::kWeek, "UTC", "2026-11-30T00:00:00Z",
                {"2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z", "2026-12-14T00:00:00Z"});
  check_periods(CalendarPeriod::kWeek, "UTC", "2026-11-29T23:59:59Z",
                {"2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"});
  check_periods(CalendarPeriod::kMonth, "UTC", "2026-11-28T13:00:00Z",
                {"2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"});
  // 29 February 2028: a 29-day February, a 366-day year.
  check_periods(CalendarPeriod::kDay, "UTC", "2028-02-29T12:00:00Z",
                {"2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z", "2028-03-02T00:00:00Z"});
  check_periods(CalendarPeriod::kMonth, "UTC", "2028-02-29T12:00:00Z",
                {"2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", "2028-04-01T00:00:00Z"});
  check_periods(CalendarPeriod::kMonth, "UTC", "2027-02-10T00:00:00Z",
                {"2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z"});
  check_periods(CalendarPeriod::kYear, "UTC", "2028-07-01T00:00:00Z",
                {"2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z", "2030-01-01T00:00:00Z"});
}

TEST_CASE("quota calendar: America/New_York across both daylight-saving changes", "[quota][unit]") {
  const char* ny = "America/New_York";
  // 8 March 2026 loses an hour (23 h); 1 November gains one (25 h).
  check_periods(CalendarPeriod::kDay, ny, "2026-03-08T12:00:00Z",
                {"2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z", "2026-03-10T04:00:00Z"});
  check_periods(CalendarPeriod::kDay, ny, "2026-11-01T12:00:00Z",
                {"2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z", "2026-11-03T05:00:00Z"});
  // The hour before each change and the one after: no gap, no overlap.
  check_periods(CalendarPeriod::kHour, ny, "2026-03-08T06:30:00Z",  // 01:30 EST
                {"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"});
  check_periods(CalendarPeriod::kHour, ny, "2026-03-08T07:30:00Z",  // 03:30 EDT
                {"2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z", "2026-03-08T09:00:00Z"});
  check_periods(CalendarPeriod::kHour, ny, "2026-11-01T05:30:00Z",  // 01:30 EDT
                {"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"});
  check_periods(CalendarPeriod::kHour, ny, "2026-11-01T06:30:00Z",  // 01:30 EST, again
                {"2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"});
  // A month holding a change: local midnights at both ends.
  check_periods(CalendarPeriod::kMonth, ny, "2026-11-15T00:00:00Z",
                {"2026-11-01T04:00:00Z", "2026-12-01T05:00:00Z", "2027-01-01T05:00:00Z"});
  // Just before local midnight, still the old day (UTC already the next).
  check_periods(CalendarPeriod::kDay, ny, "2026-11-29T04:59:59Z",
                {"2026-11-28T05:00:00Z", "2026-11-29T05:00:00Z", "2026-11-30T05:00:00Z"});
}

TEST_CASE("quota calendar: half-hour offsets, Lord Howe's half-hour change, a skipped midnight",
          "[quota][unit]") {
  // Asia/Kolkata, +05:30 all year: hours begin at half past in UTC.
  check_periods(CalendarPeriod::kHour, "Asia/Kolkata", "2026-11-28T13:00:00Z",
                {"2026-11-28T12:30:00Z", "2026-11-28T13:30:00Z", "2026-11-28T14:30:00Z"});
  check_periods(CalendarPeriod::kDay, "Asia/Kolkata", "2026-11-28T13:00:00Z",
                {"2026-11-27T18:30:00Z", "2026-11-28T18:30:00Z", "2026-11-29T18:30:00Z"});
  // The same as a fixed offset.
  check_periods(CalendarPeriod::kDay, "+05:30", "2026-11-28T13:00:00Z",
                {"2026-11-27T18:30:00Z", "2026-11-28T18:30:00Z", "2026-11-29T18:30:00Z"});
  check_periods(CalendarPeriod::kDay, "-08:00", "2026-11-28T07:59:59Z",
                {"2026-11-27T08:00:00Z", "2026-11-28T08:00:00Z", "2026-11-29T08:00:00Z"});
  // Australia/Lord_Howe moves by half an hour: +10:30 to +11 on 4 October
  // 2026 (a 23.5 h day), back on 5 April 2026 (24.5 h).
  const char* lh = "Australia/Lord_Howe";
  check_periods(CalendarPeriod::kDay, lh, "2026-10-04T00:00:00Z",
                {"2026-10-03T13:30:00Z", "2026-10-04T13:00:00Z", "2026-10-05T13:00:00Z"});
  check_periods(CalendarPeriod::kDay, lh, "2026-04-05T00:00:00Z",
                {"2026-04-04T13:00:00Z", "2026-04-05T13:30:00Z", "2026-04-06T13:30:00Z"});
  // Its hours around the spring change (15:30Z): 01:00-02:00 at +10:30, then
  // a half hour 02:30-03:00 at +11 (local 02:00-02:30 never happens).
  check_periods(CalendarPeriod::kHour, lh, "2026-10-03T15:00:00Z",
                {"2026-10-03T14:30:00Z", "2026-10-03T15:30:00Z", "2026-10-03T16:00:00Z"});
  check_periods(CalendarPeriod::kHour, lh, "2026-10-03T15:45:00Z",
                {"2026-10-03T15:30:00Z", "2026-10-03T16:00:00Z", "2026-10-03T17:00:00Z"});
  // And the autumn change (15:00Z): 01:00-02:00 at +11, then 01:30-02:00 again at +10:30.
  check_periods(CalendarPeriod::kHour, lh, "2026-04-04T14:50:00Z",
                {"2026-04-04T14:00:00Z", "2026-04-04T15:00:00Z", "2026-04-04T15:30:00Z"});
  check_periods(CalendarPeriod::kHour, lh, "2026-04-04T15:10:00Z",
                {"2026-04-04T15:00:00Z", "2026-04-04T15:30:00Z", "2026-04-04T16:30:00Z"});
  // America/Santiago springs forward at midnight (6 September 2026): that
  // day begins at the change, 01:00 local, and lasts 23 hours.
  check_periods(CalendarPeriod::kDay, "America/Santiago", "2026-09-06T12:00:00Z",
                {"2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z", "2026-09-08T03:00:00Z"});
}

TEST_CASE("quota calendar: consecutive periods tile the time line", "[quota][unit]") {
  // Over a year of days, weeks, hours in zones with changes: each period's
  // end is the next one's start, and every instant is inside its own.
  for (const char* tz : {"America/New_York", "Australia/Lord_Howe", "Europe/London", "UTC"}) {
    for (CalendarPeriod period : {CalendarPeriod::kHour, CalendarPeriod::kDay,
                                  CalendarPeriod::kWeek, CalendarPeriod::kMonth}) {
      CAPTURE(tz, static_cast<int>(period));
      const sluice::TimeZone z = zone(tz);
      auto t = static_cast<std::int64_t>(
          sluice::calendar_periods(period, z, at("2026-01-01T00:00:00Z")).start_us);
      const std::int64_t stop = at("2027-01-01T00:00:00Z");
      int checked = 0;
      while (t < stop && checked < 10000) {
        const QuotaPeriods p = sluice::calendar_periods(period, z, t);
        REQUIRE(p.start_us == static_cast<double>(t));
        REQUIRE(p.end_us > p.start_us);
        REQUIRE(p.next_end_us > p.end_us);
        const QuotaPeriods mid = sluice::calendar_periods(
            period, z, t + static_cast<std::int64_t>((p.end_us - p.start_us) / 2));
        REQUIRE(mid.start_us == p.start_us);
        REQUIRE(mid.end_us == p.end_us);
        const QuotaPeriods next =
            sluice::calendar_periods(period, z, static_cast<std::int64_t>(p.end_us));
        REQUIRE(next.start_us == p.end_us);
        REQUIRE(next.end_us == p.next_end_us);
        t = static_cast<std::int64_t>(p.end_us);
        ++checked;
      }
      CHECK(t >= stop);
    }
  }
}

TEST_CASE("quota: the period is the one of the two sent that holds the store's clock",
          "[quota][unit]") {
  const QuotaPeriods p{100.0 * kSecond, 160.0 * kSecond, 220.0 * kSecond};
  CHECK(sluice::quota_period_end(p, 100 * kSecond) == 160.0 * kSecond);
  CHECK(sluice::quota_period_end(p, 160 * kSecond - 1) == 160.0 * kSecond);
  CHECK(sluice::quota_period_end(p, 160 * kSecond) == 220.0 * kSecond);
  CHECK(sluice::quota_period_end(p, 220 * kSecond - 1) == 220.0 * kSecond);
  // Outside them (the gateway's clock far off): none, never one it guessed.
  CHECK(std::isnan(sluice::quota_period_end(p, 100 * kSecond - 1)));
  CHECK(std::isnan(sluice::quota_period_end(p, 220 * kSecond)));
  CHECK(std::isnan(sluice::quota_period_end(p, 400 * kSecond)));
}

TEST_CASE("quota: a stored period other than the one holding the store's clock is replaced",
          "[quota][unit]") {
  const QuotaPeriods p{0.0, 60.0 * kSecond, 120.0 * kSecond};
  // A period two ahead (written by a gateway whose clock ran fast): replaced.
  const sluice::BucketState future{7, 180 * kSecond, true};
  CHECK(sluice::quota_usage(future, p, 30 * kSecond).used == 0);
  CHECK(sluice::quota_usage(future, p, 30 * kSecond).end_us == 60.0 * kSecond);
  // The next period, stored while the store's clock was a little ahead: kept
  // within a second of its start, replaced further back.
  const sluice::BucketState next{7, 120 * kSecond, true};
  CHECK(sluice::quota_usage(next, p, 59 * kSecond + 1).used == 7);
  CHECK(sluice::quota_usage(next, p, 58 * kSecond).used == 0);
  // The period holding now counts.
  CHECK(sluice::quota_usage(sluice::BucketState{4, 60 * kSecond, true}, p, 30 * kSecond).used == 4);
}

sluice::LimitDescriptor quota(double capacity, QuotaPeriods periods) {
  sluice::LimitDescriptor d{"q", {}, capacity, 0};
  d.algorithm = sluice::LimitAlgorithm::kQuota;
  d.periods = periods;
  return d;
}

TEST_CASE("quota twin: capacity per period, reset at its end, never reserved", "[quota][unit]") {
  const QuotaPeriods p{0.0, 60.0 * kSecond, 120.0 * kSecond};
  std::vector<sluice::LimitDescriptor> limits{quota(3, p)};
  limits[0].max_wait_seconds = 1000;  // a quota waits for nobody
  std::vector<sluice::BucketState> states(1);
  for (int i = 0; i < 3; ++i) {
    const auto d = sluice::decide_limits(states, limits, 1, 10 * kSecond);
    REQUIRE(d.allowed);
    CHECK(d.limits[0].remaining == 2 - i);
    CHECK(d.limits[0].seconds_to_full == 50);
  }
  const auto denied = sluice::decide_limits(states, limits, 1, 20 * kSecond);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.delay_seconds == 0);
  CHECK(denied.limits[0].seconds_to_cost == 40);  // until the period ends
  CHECK(denied.limits[0].remaining == 0);
  // A cost above capacity never fits.
  CHECK(sluice::decide_limits(states, limits, 4, 20 * kSecond).limits[0].seconds_to_cost ==
        std::numeric_limits<double>::infinity());
  // The next period starts empty.
  const auto next = sluice::decide_limits(states, limits, 2, 60 * kSecond);
  CHECK(next.allowed);
  CHECK(next.limits[0].remaining == 1);
  CHECK(states[0].timestamp_us == 120 * kSecond);
  // A store clock gone back keeps the later period it stored.
  const auto back = sluice::decide_limits(states, limits, 1, 59 * kSecond);
  CHECK(back.allowed);
  CHECK(back.limits[0].remaining == 0);
  CHECK_FALSE(sluice::decide_limits(states, limits, 1, 59 * kSecond).allowed);
}

TEST_CASE("quota twin: all or nothing with a token bucket", "[quota][unit]") {
  const QuotaPeriods p{0.0, 60.0 * kSecond, 120.0 * kSecond};
  sluice::LimitDescriptor bucket{"b", {}, 1, 0.001};
  std::vector<sluice::LimitDescriptor> limits{quota(5, p), bucket};
  std::vector<sluice::BucketState> states(2);
  REQUIRE(sluice::decide_limits(states, limits, 1, kSecond).allowed);
  // The bucket is empty: the quota is not debited either.
  const auto denied = sluice::decide_limits(states, limits, 1, 2 * kSecond);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.limits[0].sufficient);
  CHECK(denied.limits[0].remaining == 4);
  CHECK(states[0].tokens == 1);
}

}  // namespace quota_test
