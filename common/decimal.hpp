// Decimal integers appended to a string, for text written on every request
// (header values, RESP lengths): the digits are written backwards into a
// local buffer and appended at once, with no locale, no format string and no
// temporary string.
#pragma once

#include <cstdint>
#include <string>

namespace sluice {

// Writes `value`'s digits just before `end` (at most 20 bytes); returns
// where they start.
inline char* put_decimal_before(char* end, std::uint64_t value) {
  char* p = end;
  do {
    *--p = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  return p;
}

inline void append_decimal(std::string& out, std::uint64_t value) {
  char digits[20];
  char* const end = digits + sizeof digits;
  const char* const p = put_decimal_before(end, value);
  out.append(p, static_cast<std::size_t>(end - p));
}

inline void append_decimal(std::string& out, std::int64_t value) {
  if (value < 0) {
    out += '-';
    // The magnitude in unsigned arithmetic: -INT64_MIN does not fit an int64.
    return append_decimal(out, ~static_cast<std::uint64_t>(value) + 1);
  }
  append_decimal(out, static_cast<std::uint64_t>(value));
}

}  // namespace sluice
