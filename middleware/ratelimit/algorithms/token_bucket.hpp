// The token-bucket arithmetic of the rate-limit script, as a pure C++ twin
// (time is passed in). decide_token_buckets() computes exactly what
// token_bucket.lua computes inside Redis: same formulas, same
// order of floating-point operations, same replies. It serves the unit tests
// (with a manual clock) and the local fallback (local/fallback_store.hpp).
#pragma once

#include <cstdint>
#include <span>

#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

// The stored state of one bucket: what the script keeps in Redis as two
// little-endian doubles (tokens, timestamp_us). A bucket that does not exist
// starts full.
struct BucketState {
  double tokens = 0;
  std::int64_t timestamp_us = 0;  // time of the last debit (server clock)
  bool exists = false;
};

// Expiry of a bucket written at a debit, in milliseconds: the time to refill an
// empty bucket completely plus a margin, so idle buckets cost no memory. Capped
// at kMaxBucketTtlMs (also for a refill rate of 0).
// The gateway computes it and passes it to the script as SET's PX argument.
inline constexpr std::int64_t kBucketTtlMarginMs = 1000;
inline constexpr std::int64_t kMaxBucketTtlMs = 1'000'000'000'000;  // ~31 years
std::int64_t bucket_ttl_ms(double capacity, double refill_per_second);

// Decides every bucket of one request at `now_us`: each bucket is refilled
// from the time elapsed since its timestamp (capped at its capacity; no refill
// when the clock went backwards). If every bucket holds at least `cost`
// tokens, all are debited and `states` updated (tokens, timestamp = the later
// of now and the stored timestamp, exists = true); otherwise nothing changes.
// An admitted request also takes each bucket's lease: floor((tokens - cost) / 2)
// capped at its lease_want (LimitState::leased).
// `states` and `limits` have the same size and order (extra entries ignored).
// seconds_to_cost is +infinity when cost > capacity (it can never be met) or
// when the refill rate is 0 and tokens are short.
RateDecision decide_token_buckets(std::span<BucketState> states,
                                  std::span<const LimitDescriptor> limits, double cost,
                                  std::int64_t now_us);

// Microseconds since the Unix epoch from the system clock.
std::int64_t system_now_us();

}  // namespace sluice
