#include "upstream/health/health_state.hpp"

#include <algorithm>

namespace sluice {

HealthState::HealthState(unsigned healthy_threshold, unsigned unhealthy_threshold) {
  set_thresholds(healthy_threshold, unhealthy_threshold);
}

void HealthState::set_thresholds(unsigned healthy_threshold, unsigned unhealthy_threshold) {
  // A threshold of 0 would change the state without a result: at least 1.
  healthy_threshold_ = std::max(healthy_threshold, 1u);
  unhealthy_threshold_ = std::max(unhealthy_threshold, 1u);
}

HealthState::Change HealthState::record(bool ok) {
  // A result that confirms the current state ends any streak towards the other.
  if (ok == healthy_) {
    streak_ = 0;
    return Change::kNone;
  }
  ++streak_;
  if (streak_ < (healthy_ ? unhealthy_threshold_ : healthy_threshold_)) return Change::kNone;
  healthy_ = ok;
  streak_ = 0;
  return ok ? Change::kBecameHealthy : Change::kBecameUnhealthy;
}

}  // namespace sluice
