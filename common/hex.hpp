// Hexadecimal digits: the value of one digit or of a two-digit pair, and bytes
// written as hex digits (lower-case for digests, script hashes, ids and
// escapes in messages; upper-case for percent-escapes). Header-only and pure.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace sluice::hex {

// The value of a hex digit of either case, or -1 for any other character.
constexpr int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The value (0..255) of the two hex digits that start `s`, or -1 when `s` is
// shorter than two characters or either one is not a hex digit.
constexpr int pair_value(std::string_view s) {
  if (s.size() < 2) return -1;
  const int hi = digit_value(s[0]);
  const int lo = digit_value(s[1]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// The lower-case hex digit of the low four bits of `nibble`.
constexpr char digit(unsigned nibble) {
  return "0123456789abcdef"[nibble & 0x0f];
}

// The upper-case hex digit of the low four bits of `nibble`.
constexpr char upper_digit(unsigned nibble) {
  return "0123456789ABCDEF"[nibble & 0x0f];
}

// Appends two lower-case hex digits for `byte`.
inline void append_byte(std::string& out, unsigned char byte) {
  out += digit(byte >> 4);
  out += digit(byte);
}

// Appends two upper-case hex digits for `byte`.
inline void append_byte_upper(std::string& out, unsigned char byte) {
  out += upper_digit(byte >> 4);
  out += upper_digit(byte);
}

// Appends two lower-case hex digits per byte, in order (written into a local
// buffer and appended a run at a time: a key's hash is hexed per request).
inline void append(std::string& out, std::span<const unsigned char> bytes) {
  char run[64];
  while (!bytes.empty()) {
    const std::size_t n = bytes.size() < sizeof run / 2 ? bytes.size() : sizeof run / 2;
    char* p = run;
    for (std::size_t i = 0; i < n; ++i) {
      *p++ = digit(bytes[i] >> 4);
      *p++ = digit(bytes[i]);
    }
    out.append(run, 2 * n);
    bytes = bytes.subspan(n);
  }
}

// Two lower-case hex digits per byte, in order.
inline std::string encode(std::span<const unsigned char> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  append(out, bytes);
  return out;
}

}  // namespace sluice::hex
