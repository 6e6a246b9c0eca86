// A cookie's value in a Cookie request header ("a=1; b=2"), as JWT sources,
// route matchers and hash keys read it. Header-only, pure; the value views
// the header.
#pragma once

#include <optional>
#include <string_view>

#include "common/ascii.hpp"

namespace sluice {

// The value of the first cookie named `name` (names compare exactly); nullopt
// when none is.
inline std::optional<std::string_view> cookie_value(std::string_view cookies,
                                                    std::string_view name) {
  while (!cookies.empty()) {
    const auto semi = cookies.find(';');
    std::string_view pair = ascii::trim(cookies.substr(0, semi));
    cookies = semi == std::string_view::npos ? std::string_view{} : cookies.substr(semi + 1);
    const auto eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) return pair.substr(eq + 1);
  }
  return std::nullopt;
}

}  // namespace sluice
