#include "gateway/session/grpc_reply.hpp"

#include <algorithm>
#include <cstdint>

#include "common/ascii.hpp"
#include "common/hex.hpp"

namespace sluice {

bool is_grpc_content_type(std::string_view content_type) {
  constexpr std::string_view kGrpc = "application/grpc";
  if (content_type.size() < kGrpc.size()) return false;
  const std::string_view type = content_type.substr(0, kGrpc.size());
  if (type != kGrpc && !ascii::iequals(type, kGrpc)) return false;
  if (content_type.size() == kGrpc.size()) return true;
  const char next = content_type[kGrpc.size()];
  return next == '+' || next == ';';
}

unsigned grpc_status_for(unsigned http_status) {
  switch (http_status) {
    case 429:
    case 413:
    case 431:
      return 8;  // RESOURCE_EXHAUSTED
    case 502:
    case 503:
      return 14;  // UNAVAILABLE
    case 504:
    case 408:
      return 4;  // DEADLINE_EXCEEDED
    case 401:
      return 16;  // UNAUTHENTICATED
    case 403:
      return 7;  // PERMISSION_DENIED
    case 404:
    case 405:
      return 12;  // UNIMPLEMENTED
    default:
      return http_status >= 400 && http_status < 500 ? 13 : 2;  // INTERNAL, UNKNOWN
  }
}

std::string grpc_percent_encode(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (unsigned char c : message) {
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out.push_back(static_cast<char>(c));
      continue;
    }
    out.push_back('%');
    hex::append_byte_upper(out, c);
  }
  return out;
}

std::optional<std::chrono::milliseconds> parse_grpc_timeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  const std::string_view digits = value.substr(0, value.size() - 1);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  std::uint64_t n = 0;
  for (char c : digits) n = n * 10 + static_cast<std::uint64_t>(c - '0');
  // Nanoseconds per unit; at most 99,999,999 hours, which fits in 64 bits as milliseconds.
  std::uint64_t ms = 0;
  switch (value.back()) {
    case 'H':
      ms = n * 3600 * 1000;
      break;
    case 'M':
      ms = n * 60 * 1000;
      break;
    case 'S':
      ms = n * 1000;
      break;
    case 'm':
      ms = n;
      break;
    case 'u':
      ms = (n + 999) / 1000;
      break;
    case 'n':
      ms = (n + 999'999) / 1'000'000;
      break;
    default:
      return std::nullopt;
  }
  if (n > 0 && ms == 0) ms = 1;
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms));
}

}  // namespace sluice
