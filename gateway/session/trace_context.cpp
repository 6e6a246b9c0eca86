#include "gateway/session/trace_context.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

bool lower_hex(std::string_view s) {
  for (const char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool all_zero(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

}  // namespace

std::optional<std::string_view> traceparent_trace_id(std::string_view value) {
  constexpr std::size_t kV00Size = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2
  if (value.size() < kV00Size || value.size() > kMaxTraceparentBytes) return std::nullopt;
  const std::string_view version = value.substr(0, 2);
  if (!lower_hex(version) || version == "ff") return std::nullopt;
  if (version == "00" && value.size() != kV00Size) return std::nullopt;
  if (value.size() > kV00Size && value[kV00Size] != '-') return std::nullopt;
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') return std::nullopt;
  const std::string_view trace_id = value.substr(3, 32);
  const std::string_view parent_id = value.substr(36, 16);
  const std::string_view flags = value.substr(53, 2);
  if (!lower_hex(trace_id) || !lower_hex(parent_id) || !lower_hex(flags)) return std::nullopt;
  if (all_zero(trace_id) || all_zero(parent_id)) return std::nullopt;
  return trace_id;
}

std::string new_traceparent(bool sampled) {
  std::string out;
  new_traceparent(out, sampled);
  return out;
}

void new_traceparent(std::string& out, bool sampled) {
  // Random hex digits as the request ids are made (X-Request-Id, 32 of them):
  // one id is the trace id, half of another the parent id.
  char trace_id[32];
  char parent_id[32];
  do generate_request_id(trace_id);
  while (all_zero({trace_id, 32}));
  do generate_request_id(parent_id);
  while (all_zero({parent_id, 16}));
  out.resize(55);  // 00-<trace id>-<parent id>-<flags>
  char* p = out.data();
  std::memcpy(p, "00-", 3);
  std::memcpy(p + 3, trace_id, 32);
  p[35] = '-';
  std::memcpy(p + 36, parent_id, 16);
  std::memcpy(p + 52, sampled ? "-01" : "-00", 3);
}

void new_span_id(std::string& out) {
  char id[32];
  do generate_request_id(id);
  while (all_zero({id, 16}));
  out.assign(id, 16);
}

bool ratio_sampled(std::string_view trace_id, double ratio) {
  if (ratio >= 1) return true;
  if (ratio <= 0 || trace_id.size() < 16) return false;
  std::uint64_t low = 0;
  for (const char c : trace_id.substr(trace_id.size() - 16)) {
    low = low << 4 | static_cast<std::uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  // 2^64 × ratio, computed in long double so that ratios near 1 keep their bits.
  const long double bound = std::ldexp(static_cast<long double>(ratio), 64);
  return static_cast<long double>(low) < bound;
}

}  // namespace sluice
