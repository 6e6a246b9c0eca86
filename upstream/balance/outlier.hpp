// Passive outlier detection (upstreams.NAME.outlier_detection): each attempt
// at a server reports how it went, and a server whose errors come in a row
// is ejected, taken out of balancing for a time that grows with each
// ejection, then back by itself. The counts live in the server's
// ServerHealth (shared by every worker, atomics, no lock); the decision to
// eject is made by the worker whose report crossed the threshold, which
// first checks that no more than max_ejection_percent of the upstream's
// servers (at least one) are ejected already.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice {

struct OutlierConfig {
  unsigned consecutive_5xx = 5;             // 5xx answers in a row (gateway errors too); 0: off
  unsigned consecutive_gateway_errors = 5;  // 502-504, failed connects, resets, timeouts; 0: off
  std::chrono::milliseconds base_ejection{30000};  // the n-th ejection lasts n times this
  std::chrono::milliseconds max_ejection{300000};  // ... at most this
  unsigned max_ejection_percent = 10;              // of the servers at once; at least one
  bool operator==(const OutlierConfig&) const = default;
};

// What one attempt at a server came to.
enum class AttemptResult {
  kSuccess,       // an answer below 500
  kServerError,   // a 5xx other than 502, 503, 504
  kGatewayError,  // 502, 503, 504, a failed connect, a reset, a timeout
};

// The outlier state of one server (a part of ServerHealth).
struct OutlierState {
  std::atomic<std::uint32_t> consecutive_5xx{0};
  std::atomic<std::uint32_t> consecutive_gateway{0};
  std::atomic<std::int64_t> ejected_until{0};  // steady clock, ns since its epoch; 0: never
  std::atomic<std::uint32_t> ejections{0};     // in a row (the multiplier); reset once forgiven
  std::atomic<std::uint64_t> ejections_total{0};
  std::atomic<std::uint64_t> requests{0};  // attempts reported
  std::atomic<std::uint64_t> errors{0};    // of them, 5xx and gateway errors

  bool ejected(std::int64_t now) const {
    return ejected_until.load(std::memory_order_relaxed) > now;
  }
  // Counts the attempt; true when it makes the server due for ejection.
  bool record(const OutlierConfig& config, AttemptResult result);
  // Due, but kept in (the upstream's share of ejected servers is full).
  void restart_runs() {
    consecutive_5xx.store(0, std::memory_order_relaxed);
    consecutive_gateway.store(0, std::memory_order_relaxed);
  }
  // Ejects it from `now`; returns how long for.
  std::chrono::milliseconds eject(const OutlierConfig& config, std::int64_t now);
  // An active health check passed at `now`: an ejected server is back at
  // once (its ejection ends then, as if it had run out).
  void forgive(std::int64_t now) { ejected_until.store(now, std::memory_order_relaxed); }
};

inline std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace sluice
