// The token-bucket arithmetic of the rate-limit script, as a pure C++ twin
// (time is passed in): the same formulas, in the same order of floating-point
// operations, as the token-bucket parts of decide_limits.lua. decide_limits()
// (limits.hpp) puts it together with the sliding window's into the whole
// decision; it serves the unit tests (with a manual clock) and the local
// fallback (local/fallback_store.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

// The stored state of one bucket: what the script keeps in Redis as two
// little-endian doubles (tokens, timestamp_us). A bucket that does not exist
// starts full. A sliding window (sliding_window.hpp) keeps its current count in
// `tokens`, its window's index in `timestamp_us` and the previous window's
// count in `previous`; a quota (quota.hpp) its used units and its period's
// end; a sliding log (sliding_log.hpp) the admission time of each unit in
// `log`.
struct BucketState {
  double tokens = 0;
  std::int64_t timestamp_us = 0;  // time of the last debit (server clock)
  bool exists = false;
  double previous = 0;  // sliding window only
  std::vector<double> log{};  // sliding log and concurrency: microseconds, oldest first
};

// A token bucket refilled to some moment, before any debit.
struct Refilled {
  double tokens = 0;
  std::int64_t timestamp_us = 0;  // the later of that moment and the stored timestamp
};

// `state` refilled at `rate` per second to `now_us`, capped at `capacity` (no
// refill when the clock went backwards; an absent bucket is full).
Refilled refill_bucket(const BucketState& state, double capacity, double rate, std::int64_t now_us);

// Seconds until `tokens` reach `cost`: 0 if they have, +infinity when cost >
// capacity or nothing refills.
double token_seconds_to_cost(double tokens, double capacity, double rate, double cost);

// Expiry of a bucket written at a debit, in milliseconds: the time to refill an
// empty bucket completely plus a margin, so idle buckets cost no memory. Capped
// at kMaxBucketTtlMs (also for a refill rate of 0).
// The gateway computes it and passes it to the script as SET's PX argument.
inline constexpr std::int64_t kBucketTtlMarginMs = 1000;
inline constexpr std::int64_t kMaxBucketTtlMs = 1'000'000'000'000;  // ~31 years
std::int64_t bucket_ttl_ms(double capacity, double refill_per_second);

// Microseconds since the Unix epoch from the system clock.
std::int64_t system_now_us();

}  // namespace sluice
