// ASCII character helpers for protocol and configuration text: classes,
// case folding, case-insensitive comparison and trimming of spaces and tabs.
// Header-only and locale-free: bytes outside ASCII are never letters or
// digits and are never changed by case folding.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace sluice::ascii {

constexpr bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

constexpr bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

constexpr char to_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

constexpr char to_upper(char c) {
  return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
}

// True for a non-empty run of decimal digits.
constexpr bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

// Equal apart from the case of ASCII letters.
constexpr bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return to_lower(x) == to_lower(y);
         });
}

// Eight bytes at a time (a header name is folded for every field of every
// HTTP/2 block): in each byte under 0x80, 'A'..'Z' gain 0x20; other bytes
// are left alone. A length not a multiple of eight ends with the last eight
// bytes, which may overlap the word before (folding twice changes nothing);
// only a text shorter than eight bytes goes a byte at a time.
inline void to_lower_in_place(char* p, std::size_t n) {
  constexpr std::uint64_t kOnes = 0x0101010101010101u;
  constexpr std::uint64_t kHigh = 0x80 * kOnes;
  const auto fold = [](char* at) {
    std::uint64_t x;
    std::memcpy(&x, at, 8);
    const std::uint64_t low7 = x & ~kHigh;
    const std::uint64_t from_a = low7 + (0x80 - 'A') * kOnes;   // high bit: >= 'A'
    const std::uint64_t past_z = low7 + (0x80 - 'Z' - 1) * kOnes;  // high bit: > 'Z'
    const std::uint64_t upper = (from_a & ~past_z) & ~x & kHigh;
    x |= upper >> 2;
    std::memcpy(at, &x, 8);
  };
  if (n >= 8) {
    char* const last = p + n - 8;
    for (; p < last; p += 8) fold(p);
    fold(last);
    return;
  }
  for (; n > 0; ++p, --n) {
    const auto c = static_cast<unsigned char>(*p);
    if (static_cast<unsigned char>(c - 'A') < 26) *p = static_cast<char>(c | 0x20);
  }
}

inline void to_lower_in_place(std::string& s) { to_lower_in_place(s.data(), s.size()); }

inline void to_upper_in_place(std::string& s) {
  std::transform(s.begin(), s.end(), s.begin(), to_upper);
}

// Spaces and tabs (HTTP's optional whitespace) removed from both ends.
constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace sluice::ascii
