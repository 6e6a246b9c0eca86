#include "gateway/config/time_zone.hpp"

#include <date/tz.h>

#include "common/ascii.hpp"

namespace sluice {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// "+HH:MM" or "-HH:MM", at most 18:00.
std::optional<int> parse_offset(std::string_view text) {
  if (text.size() != 6 || (text[0] != '+' && text[0] != '-') || text[3] != ':') return std::nullopt;
  for (std::size_t i : {1, 2, 4, 5}) {
    if (!is_digit(text[i])) return std::nullopt;
  }
  const int hours = (text[1] - '0') * 10 + (text[2] - '0');
  const int minutes = (text[4] - '0') * 10 + (text[5] - '0');
  if (minutes > 59 || hours * 60 + minutes > 18 * 60) return std::nullopt;
  const int offset = hours * 60 + minutes;
  return text[0] == '-' ? -offset : offset;
}

// Letters, digits and "_+-/" in parts that are neither empty nor dots.
bool plausible_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  std::size_t part_start = 0;
  for (std::size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '/') {
      const std::string_view part = name.substr(part_start, i - part_start);
      if (part.empty() || part == "." || part == "..") return false;
      part_start = i + 1;
      continue;
    }
    const char c = name[i];
    if (!(ascii::is_alpha(c) || is_digit(c) || c == '_' || c == '+' || c == '-')) return false;
  }
  return true;
}

}  // namespace

std::optional<TimeZone> parse_time_zone(std::string_view text, std::string& error) {
  TimeZone tz;
  tz.name = std::string(text);
  if (text == "UTC" || text == "Z") return tz;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    const auto offset = parse_offset(text);
    if (!offset) {
      error = "a fixed offset is +HH:MM or -HH:MM, at most 18:00";
      return std::nullopt;
    }
    tz.offset_minutes = *offset;
    return tz;
  }
  if (!plausible_name(text)) {
    error = "expected UTC, an offset such as +05:30, or a zone name such as America/New_York";
    return std::nullopt;
  }
  try {
    tz.zone = date::locate_zone(text);
  } catch (const std::exception&) {
    error = "no such time zone in the system's database (is tzdata installed?)";
    return std::nullopt;
  }
  return tz;
}

}  // namespace sluice
