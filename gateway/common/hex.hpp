// Hexadecimal digits: the value of one digit, and bytes written as lower-case
// hex (digests, script hashes, escapes in messages). Header-only and pure.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace sluice::hex {

// The value of a hex digit of either case, or -1 for any other character.
constexpr int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Appends two lower-case hex digits for `byte`.
inline void append_byte(std::string& out, unsigned char byte) {
  constexpr char kDigits[] = "0123456789abcdef";
  out += kDigits[byte >> 4];
  out += kDigits[byte & 0x0f];
}

// Two lower-case hex digits per byte, in order.
inline std::string encode(std::span<const unsigned char> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char byte : bytes) append_byte(out, byte);
  return out;
}

}  // namespace sluice::hex
