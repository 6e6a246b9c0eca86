// A sliding log: at most `capacity` units admitted in any span of
// window_seconds, exactly. It keeps the admission time of every unit admitted
// within the window (in Redis a sorted set, one member per unit, scored by
// Redis' TIME in microseconds), so its memory grows with capacity (capped at
// kMaxSlidingLogCapacity). A request of cost c counts ceil(c) units: a
// request fits when the units admitted in the window ending now plus its own
// are at most capacity. Never reserved.
//
// The pure C++ twin of the sliding-log section of decide_limits.lua: the
// same arithmetic in the same order of floating-point operations (a component
// test checks bit for bit), for the unit tests and the local fallback.
#pragma once

#include <cstdint>

#include "middleware/ratelimit/algorithms/token_bucket.hpp"

namespace sluice {

// The whole units a request of `cost` takes from a log.
double log_units(double cost);

// The log's entries at `now_us`: those admitted after now - window (older
// ones have left), oldest first.
void slide_log(BucketState& state, double window_seconds, std::int64_t now_us);

// Seconds until `units` more fit in a slid log (0 if they do now; +infinity
// when units > capacity): until enough of its oldest entries have left.
double log_seconds_to_cost(const BucketState& slid, double capacity, double window_seconds,
                           double units, std::int64_t now_us);

// Seconds until a slid log is empty.
double log_seconds_to_full(const BucketState& slid, double window_seconds, std::int64_t now_us);

// The expiry of a log's key, in milliseconds, set at each debit: its window
// and a second.
std::int64_t log_ttl_ms(double window_seconds);

}  // namespace sluice
