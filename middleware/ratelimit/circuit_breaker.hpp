// A circuit breaker for the Redis limiter (config: redis.circuit_breaker).
// Closed: every call goes through; `failures` consecutive failures open it.
// Open: calls are refused for `open_for`; then it turns half-open.
// Half-open: exactly one trial call goes through, others are refused while it
// is in flight; its success closes the breaker, its failure re-opens it.
// Time is passed in, so tests drive it with a manual clock. Not thread-safe: one per worker, used
// on that worker's executor.
#pragma once

#include <chrono>
#include <cstdint>

namespace sluice {

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { kClosed, kOpen, kHalfOpen };

  // failures == 0 is taken as 1.
  CircuitBreaker(unsigned failures, std::chrono::milliseconds open_for);

  // May a call be made now? In half-open state this returns true once (the
  // trial) and false until the trial's outcome is reported. A trial whose
  // outcome never comes is replaced after another `open_for`.
  bool allow(Clock::time_point now);

  // The outcome of a call that allow() let through.
  void on_success(Clock::time_point now);
  void on_failure(Clock::time_point now);

  // The state at `now` (open turns half-open once open_for has passed).
  // A probe outside the trial found Redis still unreachable: a breaker that
  // is not closed opens for another period from now.
  void reopen(Clock::time_point now);
  State state(Clock::time_point now) const;
  bool is_open(Clock::time_point now) const { return state(now) != State::kClosed; }
  // How long calls stay refused from `now`: the rest of the open period while
  // open, zero when closed or half-open (a trial may go, or is in flight).
  std::chrono::milliseconds open_remaining(Clock::time_point now) const;
  std::chrono::milliseconds open_for() const { return open_for_; }
  unsigned consecutive_failures() const { return consecutive_failures_; }

 private:
  void open(Clock::time_point now);

  unsigned threshold_;
  std::chrono::milliseconds open_for_;
  State state_ = State::kClosed;
  unsigned consecutive_failures_ = 0;
  Clock::time_point opened_at_{};
  bool trial_in_flight_ = false;
  Clock::time_point trial_started_{};
};

}  // namespace sluice
