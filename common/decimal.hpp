// Decimal integers appended to a string, for text written on every request
// (header values, RESP lengths): the digits are written backwards into a
// local buffer and appended at once, with no locale, no format string and no
// temporary string.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice {

// How many digits `value` has (1 to 20), without dividing: the bit width
// gives it within one, a table of powers of ten settles which.
inline std::size_t decimal_digits(std::uint64_t value) {
  static constexpr std::uint64_t kPowers[] = {
      1ULL,
      10ULL,
      100ULL,
      1000ULL,
      10000ULL,
      100000ULL,
      1000000ULL,
      10000000ULL,
      100000000ULL,
      1000000000ULL,
      10000000000ULL,
      100000000000ULL,
      1000000000000ULL,
      10000000000000ULL,
      100000000000000ULL,
      1000000000000000ULL,
      10000000000000000ULL,
      100000000000000000ULL,
      1000000000000000000ULL,
      10000000000000000000ULL};
  // floor(log10(2^bits)) for the value's bit width: its digits, or one less.
  const auto guess = static_cast<std::size_t>((std::bit_width(value) * 1233) >> 12);
  return guess + (guess < 20 && value >= kPowers[guess] ? 1 : 0) + (value == 0 ? 1 : 0);
}

// Writes `value`'s digits just before `end` (at most 20 bytes), two at a
// time from a table; returns where they start.
inline char* put_decimal_before(char* end, std::uint64_t value) {
  static constexpr char kPairs[] =
      "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
      "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  char* p = end;
  while (value >= 100) {
    const auto pair = static_cast<std::size_t>(value % 100) * 2;
    value /= 100;
    *--p = kPairs[pair + 1];
    *--p = kPairs[pair];
  }
  if (value >= 10) {
    const auto pair = static_cast<std::size_t>(value) * 2;
    *--p = kPairs[pair + 1];
    *--p = kPairs[pair];
  } else {
    *--p = static_cast<char>('0' + value);
  }
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
