// Query parameters as rate-limit keys read them, and the percent- and
// form-decoding behind that. Pure functions, no I/O.
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

namespace sluice {

// The value of query parameter `name` (form-decoded; the first occurrence
// wins); nullopt when absent.
std::optional<std::string> query_param(std::string_view query, std::string_view name);

// How many times query parameter `name` occurs (with or without a value).
std::size_t query_param_count(std::string_view query, std::string_view name);

// Decodes %XX escapes; a malformed escape is kept as it is. '+' is kept.
std::string percent_decode(std::string_view text);

// '+' is a space, then %XX escapes are decoded as by percent_decode.
std::string form_decode(std::string_view text);

}  // namespace sluice
