// The outcome of one refund sent as several Redis calls (one per hash slot
// on a Redis Cluster), told once every call has answered.
#pragma once

#include <cstddef>
#include <system_error>
#include <utility>

#include "middleware/ratelimit/rate_limiter.hpp"
#include "middleware/ratelimit/redis/limiter_error.hpp"

namespace sluice {

// The outcome of a refund sent as several calls, for `done` (may be empty)
// once each of the `waiting` calls has been counted: none when all were
// applied; an error that never reached Redis only when none of them did
// (then the whole may be sent again); else one that says some of it may
// have been applied (the first such error, or kPartlyApplied).
struct RefundGather {
  explicit RefundGather(RefundHandler on_done) : done(std::move(on_done)) {}
  void counted(std::error_code ec) {
    if (!ec) {
      applied = true;
    } else if (never_reached_redis(ec)) {
      if (!unsent) unsent = ec;
    } else if (!maybe_applied) {
      maybe_applied = ec;
    }
    if (--waiting == 0 && done) done(outcome());
  }
  std::error_code outcome() const {
    if (maybe_applied) return maybe_applied;
    if (unsent && applied) return make_error_code(LimiterError::kPartlyApplied);
    return unsent;
  }
  std::size_t waiting = 0;
  bool applied = false;
  std::error_code unsent;
  std::error_code maybe_applied;
  RefundHandler done;
};

}  // namespace sluice
