// ASCII character helpers for protocol and configuration text: classes,
// case folding, case-insensitive comparison and trimming of spaces and tabs.
// Header-only and locale-free: bytes outside ASCII are never letters or
// digits and are never changed by case folding.
#pragma once

#include <algorithm>
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

inline void to_lower_in_place(std::string& s) {
  std::transform(s.begin(), s.end(), s.begin(), to_lower);
}

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
