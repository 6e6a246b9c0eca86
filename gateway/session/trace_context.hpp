// W3C Trace Context for a proxied request: a valid incoming traceparent (and
// its tracestate) is forwarded as it came; a missing, malformed, too long,
// all-zero, version-ff or repeated one is replaced by a new traceparent (and
// any tracestate dropped: it belongs to the trace that was refused). With
// tracing on, a sampled request's traceparent names Sluice's own span as the
// parent upstream. Pure parsing; new ids come from a per-thread generator
// seeded by the OS.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

inline constexpr std::size_t kMaxTraceparentBytes = 512;

// Where the parts of a version-00 traceparent are:
// "00-<trace id>-<parent id>-<flags>", each part after a '-'.
namespace traceparent_v00 {
inline constexpr std::size_t kTraceId = 3;  // 32 lower-case hex digits
inline constexpr std::size_t kTraceIdSize = 32;
inline constexpr std::size_t kParentId = 36;  // 16 lower-case hex digits
inline constexpr std::size_t kParentIdSize = 16;
inline constexpr std::size_t kFlags = 53;  // 2 lower-case hex digits
inline constexpr std::size_t kSize = 55;
}  // namespace traceparent_v00

// The trace id (32 lower-case hex digits) of a well-formed traceparent value,
// else nullopt. Version 00 must be exactly version-traceid-parentid-flags;
// a later version (not ff) may carry more after a '-'.
std::optional<std::string_view> traceparent_trace_id(std::string_view value);

// A new traceparent "00-<trace id>-<parent id>-<flags>" into `out` (its
// capacity reused), flags 01 when `sampled`, else 00.
void new_traceparent(std::string& out, bool sampled);
std::string new_traceparent(bool sampled);

// A new span id (16 lower-case hex digits, not all zero) into `out`.
void new_span_id(std::string& out);

// OpenTelemetry's TraceIdRatioBased sampler: the trace id's last 16 hex
// digits, read as a number, are below ratio × 2^64 (every id at 1, none at 0).
bool ratio_sampled(std::string_view trace_id, double ratio);

}  // namespace sluice
