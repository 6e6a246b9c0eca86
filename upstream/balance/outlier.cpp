#include "upstream/balance/outlier.hpp"

#include <algorithm>

namespace sluice {

bool OutlierState::record(const OutlierConfig& config, AttemptResult result) {
  requests.fetch_add(1, std::memory_order_relaxed);
  if (result == AttemptResult::kSuccess) {
    // Written only when not zero already: a healthy server's reports do not
    // bounce its cache line between the workers.
    if (consecutive_5xx.load(std::memory_order_relaxed) != 0) consecutive_5xx.store(0);
    if (consecutive_gateway.load(std::memory_order_relaxed) != 0) consecutive_gateway.store(0);
    return false;
  }
  errors.fetch_add(1, std::memory_order_relaxed);
  const auto in_a_row = consecutive_5xx.fetch_add(1, std::memory_order_relaxed) + 1;
  bool due = config.consecutive_5xx > 0 && in_a_row >= config.consecutive_5xx;
  if (result == AttemptResult::kGatewayError) {
    const auto gateway = consecutive_gateway.fetch_add(1, std::memory_order_relaxed) + 1;
    due = due || (config.consecutive_gateway_errors > 0 &&
                  gateway >= config.consecutive_gateway_errors);
  } else if (consecutive_gateway.load(std::memory_order_relaxed) != 0) {
    consecutive_gateway.store(0);
  }
  return due;
}

std::chrono::milliseconds OutlierState::eject(const OutlierConfig& config, std::int64_t now) {
  // A server that stayed in for as long as the longest ejection since its
  // last one is forgiven: its next ejection is a first one again.
  const auto last = ejected_until.load(std::memory_order_relaxed);
  const auto forgive_after =
      std::chrono::duration_cast<std::chrono::nanoseconds>(config.max_ejection).count();
  if (last != 0 && now - last > forgive_after) ejections.store(0, std::memory_order_relaxed);
  const auto n = ejections.fetch_add(1, std::memory_order_relaxed) + 1;
  const auto length = std::min(config.max_ejection, config.base_ejection * n);
  ejected_until.store(now + std::chrono::duration_cast<std::chrono::nanoseconds>(length).count(),
                      std::memory_order_relaxed);
  ejections_total.fetch_add(1, std::memory_order_relaxed);
  restart_runs();
  return length;
}

}  // namespace sluice
