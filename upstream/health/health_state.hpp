// The health of one upstream server under active checks, as a pure state
// machine: it counts consecutive good and failed checks against the
// thresholds and says when the server changes state. No clock, no I/O; the
// checker that owns it feeds it one result per check, on one thread.
//
// A server starts healthy, so that nothing is refused before the first check.
// A healthy server becomes unhealthy after `unhealthy_threshold` failed checks
// in a row; an unhealthy one becomes healthy after `healthy_threshold` good
// checks in a row. A result of the other kind restarts the count.
#pragma once

namespace sluice {

class HealthState {
 public:
  enum class Change { kNone, kBecameHealthy, kBecameUnhealthy };

  HealthState(unsigned healthy_threshold, unsigned unhealthy_threshold);

  // One check's result; whether it changed the state.
  Change record(bool ok);

  // New thresholds (a reload): the state and the current count are kept; a
  // count that already reaches a lowered threshold changes the state at the
  // next result of the same kind.
  void set_thresholds(unsigned healthy_threshold, unsigned unhealthy_threshold);

  bool healthy() const { return healthy_; }
  // Consecutive results counting towards the other state (0 after a change).
  unsigned streak() const { return streak_; }

 private:
  unsigned healthy_threshold_;
  unsigned unhealthy_threshold_;
  bool healthy_ = true;
  unsigned streak_ = 0;
};

}  // namespace sluice
