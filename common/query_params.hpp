// Query parameters as rate-limit keys read them, and the percent- and
// form-decoding behind that. Pure functions, no I/O; header-only (route
// matchers read query parameters the same way).
//
// Query parameters are read as an HTML form encodes them: names and values are
// form-decoded, so "a+b", "a%20b" and "a%20%62" are the same value, and
// "k%65y" is the parameter "key". A '%' not followed by two hex digits is kept
// as it is ("100%" stays "100%", the same value as "100%25").
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/hex.hpp"

namespace sluice {

namespace query_detail {

// The decoded character at text[i], advancing i past what it consumed: a %XX
// escape, '+' as a space when `plus_is_space`, else the character itself.
inline char decode_next(std::string_view text, std::size_t& i, bool plus_is_space) {
  const char c = text[i++];
  if (c == '+' && plus_is_space) return ' ';
  if (c == '%') {
    const int value = hex::pair_value(text.substr(i));
    if (value >= 0) {
      i += 2;
      return static_cast<char>(value);
    }
  }
  return c;
}

inline std::string decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) out += decode_next(text, i, plus_is_space);
  return out;
}

// form_decode(raw) == decoded, without building the decoded string.
inline bool form_decoded_equals(std::string_view raw, std::string_view decoded) {
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < raw.size()) {
    if (j == decoded.size() || decode_next(raw, i, true) != decoded[j]) return false;
    ++j;
  }
  return j == decoded.size();
}

// Calls on_param(raw name, raw value or nullopt) for each '&'-separated pair.
template <class F>
void for_each_param(std::string_view query, F on_param) {
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const std::size_t eq = pair.find('=');
    std::optional<std::string_view> value;
    if (eq != std::string_view::npos) value.emplace(pair.substr(eq + 1));
    if (!on_param(pair.substr(0, eq), value)) return;
  }
}

}  // namespace query_detail

// Decodes %XX escapes; a malformed escape is kept as it is. '+' is kept.
inline std::string percent_decode(std::string_view text) {
  return query_detail::decode(text, false);
}

// '+' is a space, then %XX escapes are decoded as by percent_decode.
inline std::string form_decode(std::string_view text) {
  return query_detail::decode(text, true);
}

// The value of query parameter `name` (form-decoded; the first occurrence
// wins); nullopt when absent.
inline std::optional<std::string> query_param(std::string_view query, std::string_view name) {
  std::optional<std::string> result;
  query_detail::for_each_param(query, [&](std::string_view raw_name,
                                          std::optional<std::string_view> value) {
    if (!query_detail::form_decoded_equals(raw_name, name)) return true;
    result = value ? form_decode(*value) : std::string{};
    return false;
  });
  return result;
}

// How many times query parameter `name` occurs (with or without a value).
inline std::size_t query_param_count(std::string_view query, std::string_view name) {
  std::size_t count = 0;
  query_detail::for_each_param(query, [&](std::string_view raw_name,
                                          std::optional<std::string_view>) {
    if (query_detail::form_decoded_equals(raw_name, name)) ++count;
    return true;
  });
  return count;
}

}  // namespace sluice
