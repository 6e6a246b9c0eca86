// base64url without padding (RFC 4648 section 5), to make JWS parts in tests
// and benchmarks. Header-only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::testing {

inline std::string base64url(std::string_view bytes) {
  static constexpr const char* kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  std::uint32_t bits = 0;
  int count = 0;
  for (const char c : bytes) {
    bits = (bits << 8) | static_cast<unsigned char>(c);
    count += 8;
    while (count >= 6) {
      count -= 6;
      out += kAlphabet[(bits >> count) & 63];
    }
  }
  if (count > 0) out += kAlphabet[(bits << (6 - count)) & 63];
  return out;
}

}  // namespace sluice::testing
