#include "middleware/ratelimit/algorithms/token_bucket.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace sluice {

Refilled refill_bucket(const BucketState& state, double capacity, double rate,
                       std::int64_t now_us) {
  if (!state.exists) return {capacity, now_us};
  double elapsed = 0;
  std::int64_t timestamp_us = now_us;
  if (now_us > state.timestamp_us) {
    elapsed = static_cast<double>(now_us - state.timestamp_us);
  } else {
    timestamp_us = state.timestamp_us;  // clock went backwards: no refill, keep the later time
  }
  return {std::min(capacity, state.tokens + elapsed * rate / 1000000.0), timestamp_us};
}

double token_seconds_to_cost(double tokens, double capacity, double rate, double cost) {
  if (cost > capacity) return std::numeric_limits<double>::infinity();
  if (tokens < cost) return (cost - tokens) / rate;
  return 0;
}

std::int64_t bucket_ttl_ms(double capacity, double refill_per_second) {
  if (!(refill_per_second > 0)) return kMaxBucketTtlMs;
  const double ttl = std::min(
      std::ceil(capacity / refill_per_second * 1000.0) + static_cast<double>(kBucketTtlMarginMs),
      static_cast<double>(kMaxBucketTtlMs));
  return static_cast<std::int64_t>(ttl);
}

std::int64_t system_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace sluice
