#include "middleware/ratelimit/circuit_breaker.hpp"

namespace sluice {

CircuitBreaker::CircuitBreaker(unsigned failures, std::chrono::milliseconds open_for)
    : threshold_(failures == 0 ? 1 : failures), open_for_(open_for) {}

CircuitBreaker::State CircuitBreaker::state(Clock::time_point now) const {
  if (state_ == State::kOpen && now - opened_at_ >= open_for_) return State::kHalfOpen;
  return state_;
}

std::chrono::milliseconds CircuitBreaker::open_remaining(Clock::time_point now) const {
  if (state(now) != State::kOpen) return std::chrono::milliseconds{0};
  // Rounded up, so that a caller told to wait this long finds the period over.
  return std::chrono::ceil<std::chrono::milliseconds>(opened_at_ + open_for_ - now);
}

bool CircuitBreaker::allow(Clock::time_point now) {
  switch (state(now)) {
    case State::kClosed:
      return true;
    case State::kOpen:
      return false;
    case State::kHalfOpen:
      // One trial at a time; a trial lost for a whole open period is replaced.
      if (state_ == State::kHalfOpen && trial_in_flight_ && now - trial_started_ < open_for_) {
        return false;
      }
      state_ = State::kHalfOpen;
      trial_in_flight_ = true;
      trial_started_ = now;
      return true;
  }
  return false;
}

void CircuitBreaker::on_success(Clock::time_point /*now*/) {
  // A success while open comes from a call made before the breaker opened: it
  // proves little, so only closed and half-open states react.
  if (state_ == State::kOpen) return;
  state_ = State::kClosed;
  consecutive_failures_ = 0;
  trial_in_flight_ = false;
}

void CircuitBreaker::on_failure(Clock::time_point now) {
  switch (state_) {
    case State::kClosed:
      if (++consecutive_failures_ >= threshold_) open(now);
      break;
    case State::kHalfOpen:
      open(now);
      break;
    case State::kOpen:
      break;  // a late failure of a call made before opening
  }
}

void CircuitBreaker::reopen(Clock::time_point now) {
  if (state(now) != State::kClosed) open(now);
}

void CircuitBreaker::open(Clock::time_point now) {
  state_ = State::kOpen;
  opened_at_ = now;
  trial_in_flight_ = false;
}

}  // namespace sluice
