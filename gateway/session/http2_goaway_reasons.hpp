// The reasons sluice_http2_goaways_total counts an HTTP/2 connection ended by
// a GOAWAY for (docs/metrics.md), each seeded at zero.
#pragma once

#include <string_view>

namespace sluice {

inline constexpr std::string_view kHttp2GoawayReasons[] = {
    "rapid_reset",        "flood",            "continuation_flood", "header_flood",
    "header_timeout",     "too_many_streams", "stream_id_reused",   "stream_closed",
    "protocol_error",     "flow_control_error", "frame_size_error", "compression_error",
    "bad_preface",        "internal_error",   "other"};

}  // namespace sluice
