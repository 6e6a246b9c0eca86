// The spans of a recorded exchange in OTLP's JSON encoding (the OTLP/HTTP
// "application/json" form: ids as hex strings, times as decimal strings of
// Unix nanoseconds, enums as numbers), and the export request that carries a
// batch of them. Built by hand into one string, with no document tree. Pure.
//
// The spans of one request:
//   - the server span: "{method} {route}", kind SERVER, Sluice's span id (the
//     parent the upstream sees), with HTTP semantic-convention attributes;
//   - "ratelimit" (INTERNAL), when the limiter was asked: the limits decided,
//     the decision, who answered (Redis, a lease, the denial cache, the local
//     fallback) and Redis' round trip;
//   - one "upstream {name}" (CLIENT) per attempt at a server: the server, the
//     protocol, the status, the outcome and the resend count.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/middleware.hpp"

namespace sluice {

// Turns the steady clock's time points into Unix nanoseconds, as of one reading of both clocks.
class SpanClock {
 public:
  SpanClock(std::chrono::system_clock::time_point wall, std::chrono::steady_clock::time_point now)
      : wall_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(wall.time_since_epoch())
                     .count()),
        now_(now) {}
  static SpanClock now() {
    return {std::chrono::system_clock::now(), std::chrono::steady_clock::now()};
  }
  std::int64_t unix_ns(std::chrono::steady_clock::time_point t) const {
    return wall_ns_ - std::chrono::duration_cast<std::chrono::nanoseconds>(now_ - t).count();
  }

 private:
  std::int64_t wall_ns_;
  std::chrono::steady_clock::time_point now_;
};

// Appends the spans of `summary` (its trace recorded: summary.trace set) to
// `out`, as JSON objects separated by commas (a comma first when `out` is
// not empty). Returns how many.
std::size_t append_exchange_spans(std::string& out, const ExchangeSummary& summary,
                                  const SpanClock& clock);

// An ExportTraceServiceRequest: one resource (its attributes in order), one
// scope ("sluice", `version`), and `spans`: pieces append_exchange_spans made.
std::string otlp_export_request(std::span<const std::pair<std::string, std::string>> resource,
                                std::string_view version, std::span<const std::string> spans);

}  // namespace sluice
