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

// Random hex digits as the request ids are made (X-Request-Id, 32 of them):
// a trace id is one such id, a parent or span id the first half of one.
void draw_trace_id(char (&id)[32]) {
  do generate_request_id(id);
  while (all_zero({id, traceparent_v00::kTraceIdSize}));
}

void draw_span_id(char (&id)[32]) {
  do generate_request_id(id);
  while (all_zero({id, traceparent_v00::kParentIdSize}));
}

}  // namespace

std::optional<std::string_view> traceparent_trace_id(std::string_view value) {
  using namespace traceparent_v00;
  if (value.size() < kSize || value.size() > kMaxTraceparentBytes) return std::nullopt;
  const std::string_view version = value.substr(0, 2);
  if (!lower_hex(version) || version == "ff") return std::nullopt;
  if (version == "00" && value.size() != kSize) return std::nullopt;
  if (value.size() > kSize && value[kSize] != '-') return std::nullopt;
  if (value[kTraceId - 1] != '-' || value[kParentId - 1] != '-' || value[kFlags - 1] != '-') {
    return std::nullopt;
  }
  const std::string_view trace_id = value.substr(kTraceId, kTraceIdSize);
  const std::string_view parent_id = value.substr(kParentId, kParentIdSize);
  const std::string_view flags = value.substr(kFlags, 2);
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
  using namespace traceparent_v00;
  char trace_id[32];
  char parent_id[32];
  draw_trace_id(trace_id);
  draw_span_id(parent_id);
  out.resize(kSize);
  char* p = out.data();
  std::memcpy(p, "00-", kTraceId);
  std::memcpy(p + kTraceId, trace_id, kTraceIdSize);
  p[kParentId - 1] = '-';
  std::memcpy(p + kParentId, parent_id, kParentIdSize);
  std::memcpy(p + kFlags - 1, sampled ? "-01" : "-00", 3);
}

void new_span_id(std::string& out) {
  char id[32];
  draw_span_id(id);
  out.assign(id, traceparent_v00::kParentIdSize);
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
