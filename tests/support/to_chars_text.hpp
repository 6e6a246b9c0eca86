// An integer as std::to_chars writes it: the reference the decimal writers'
// tests compare against.
#pragma once

#include <charconv>
#include <string>

namespace sluice::test {

inline std::string to_chars_text(auto value) {
  char digits[24];
  return std::string(digits, std::to_chars(digits, digits + sizeof digits, value).ptr);
}

}  // namespace sluice::test
