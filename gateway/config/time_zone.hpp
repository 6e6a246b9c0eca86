// A time zone as the configuration names it: "UTC", a fixed offset from UTC
// ("+05:30", "-08:00"), or an IANA name ("America/New_York") from the
// system's time zone database (Debian's tzdata). Quotas cut their calendar
// periods in one.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace date {
class time_zone;
}

namespace sluice {

struct TimeZone {
  std::string name = "UTC";  // as written
  int offset_minutes = 0;    // a fixed offset (UTC: 0); unused with `zone`
  // An IANA zone, with its daylight-saving changes; null for a fixed offset.
  // Lives as long as the process.
  const date::time_zone* zone = nullptr;
};

// The zone `text` names; nullopt with `error` set when it is not one of the
// three forms, or names no zone of the database. An offset is at most 18
// hours; a name is letters, digits and "_+-/", with no empty, "." or ".."
// part (never a path).
std::optional<TimeZone> parse_time_zone(std::string_view text, std::string& error);

}  // namespace sluice
