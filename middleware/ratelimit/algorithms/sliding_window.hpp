// The sliding-window arithmetic of the rate-limit script, as a pure C++ twin
// (time is passed in): the same formulas, in the same order of floating-point
// operations, as the sliding-window parts of decide_limits.lua, so that the
// results are bit-identical (a component test checks on a real Redis).
//
// The counter approximation: time is cut into fixed windows of
// window_seconds; a bucket counts what was admitted in the current window and
// in the previous one, and estimates the sliding window's count as
//   previous * (window - elapsed_in_window) / window + current.
// A request fits when estimate + cost <= capacity. The estimate assumes the
// previous window's requests were spread evenly over it.
#pragma once

#include <cstdint>

#include "middleware/ratelimit/algorithms/token_bucket.hpp"

namespace sluice {

// A sliding window's counts at some moment, rolled to the window holding it:
// a window that has ended becomes the previous one, an older one is dropped.
// Stored in a BucketState as tokens = current, previous = previous,
// timestamp_us = the window's index floor(now_us / window_us).
struct WindowCounts {
  double current = 0;
  double previous = 0;
  double index = 0;       // floor(now_us / window_us), or the stored index if later
  double elapsed_us = 0;  // into that window (0 when the clock went backwards)
  double window_us = 0;
};

// The counts of `state` (absent: empty) at `now_us`.
WindowCounts window_counts(const BucketState& state, double window_seconds, std::int64_t now_us);

// The estimated count of the sliding window ending now.
double window_estimate(const WindowCounts& counts);

// Seconds until a request of `cost` fits (0 when it does now): in this window
// as the previous count slides out, or in the next one, where the current
// count becomes the previous one. +infinity when cost > capacity.
double window_seconds_to_cost(const WindowCounts& counts, double capacity, double cost);

// Seconds until the estimate is 0.
double window_seconds_to_full(const WindowCounts& counts);

// Expiry of a window's key, in milliseconds: two windows, after which its
// counts no longer weigh on any estimate, and 1 ms more: Redis sets an expiry
// from its clock in whole milliseconds (up to 1 ms before the microsecond
// TIME the counts are kept by), so that the key never goes while its previous
// window still counts.
std::int64_t window_ttl_ms(double window_seconds);

}  // namespace sluice
