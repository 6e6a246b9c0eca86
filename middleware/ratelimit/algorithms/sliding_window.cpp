#include "middleware/ratelimit/algorithms/sliding_window.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sluice {

WindowCounts window_counts(const BucketState& state, double window_seconds, std::int64_t now_us) {
  WindowCounts c;
  c.window_us = window_seconds * 1000000.0;
  const double now = static_cast<double>(now_us);
  c.index = std::floor(now / c.window_us);
  c.elapsed_us = now - c.index * c.window_us;
  if (!state.exists) return c;
  const double stored = static_cast<double>(state.timestamp_us);
  if (stored == c.index) {
    c.current = state.tokens;
    c.previous = state.previous;
  } else if (stored == c.index - 1) {
    c.previous = state.tokens;
  } else if (stored > c.index) {
    // The clock went backwards: the stored window stays the current one.
    c.current = state.tokens;
    c.previous = state.previous;
    c.index = stored;
    c.elapsed_us = 0;
  }
  return c;
}

double window_estimate(const WindowCounts& c) {
  return c.previous * ((c.window_us - c.elapsed_us) / c.window_us) + c.current;
}

double window_seconds_to_cost(const WindowCounts& c, double capacity, double cost) {
  if (cost > capacity) return std::numeric_limits<double>::infinity();
  const double room = capacity - cost;
  const double w = c.window_us;
  const double e = c.elapsed_us;
  if (window_estimate(c) <= room) return 0;
  if (c.current <= room) return (w - w * (room - c.current) / c.previous - e) / 1000000.0;
  return (w - e + (w - w * room / c.current)) / 1000000.0;
}

double window_seconds_to_full(const WindowCounts& c) {
  if (c.current > 0) return (c.window_us - c.elapsed_us + c.window_us) / 1000000.0;
  if (c.previous > 0) return (c.window_us - c.elapsed_us) / 1000000.0;
  return 0;
}

std::int64_t window_ttl_ms(double window_seconds) {
  const double ttl =
      std::min(std::ceil(window_seconds * 2000.0) + 1, static_cast<double>(kMaxBucketTtlMs));
  return std::max<std::int64_t>(static_cast<std::int64_t>(ttl), 1);
}

}  // namespace sluice
