#include "middleware/ratelimit/algorithms/token_bucket.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

namespace sluice {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The bucket after refilling, before any debit. Mirrors the first loop of the
// script: the same operations in the same order, so results are bit-identical.
struct Refilled {
  double tokens = 0;
  std::int64_t timestamp_us = 0;
};

Refilled refill(const BucketState& state, double capacity, double rate, std::int64_t now_us) {
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

}  // namespace

std::int64_t bucket_ttl_ms(double capacity, double refill_per_second) {
  if (!(refill_per_second > 0)) return kMaxBucketTtlMs;
  const double ttl = std::min(
      std::ceil(capacity / refill_per_second * 1000.0) + static_cast<double>(kBucketTtlMarginMs),
      static_cast<double>(kMaxBucketTtlMs));
  return static_cast<std::int64_t>(ttl);
}

RateDecision decide_token_buckets(std::span<BucketState> states,
                                  std::span<const LimitDescriptor> limits, double cost,
                                  std::int64_t now_us) {
  const std::size_t n = std::min(states.size(), limits.size());
  RateDecision decision;
  decision.allowed = true;
  decision.limits.resize(n);

  // Refill every bucket; the request passes only if each has `cost` tokens.
  std::vector<Refilled> refilled(n);
  for (std::size_t i = 0; i < n; ++i) {
    refilled[i] = refill(states[i], limits[i].capacity, limits[i].refill_per_second, now_us);
    if (refilled[i].tokens < cost) decision.allowed = false;
  }

  // Debit all or none (with each bucket's lease), and report each bucket as
  // the script does.
  for (std::size_t i = 0; i < n; ++i) {
    const double capacity = limits[i].capacity;
    const double rate = limits[i].refill_per_second;
    double tokens = refilled[i].tokens;
    LimitState& out = decision.limits[i];
    out.sufficient = tokens >= cost;
    if (decision.allowed) {
      double grant = 0;
      if (limits[i].lease_want > 0) {
        grant = std::floor((tokens - cost) / 2);
        if (grant > limits[i].lease_want) grant = limits[i].lease_want;
      }
      tokens = tokens - cost - grant;
      out.leased = grant;
      states[i] = BucketState{tokens, refilled[i].timestamp_us, true};
    }
    out.remaining = tokens;
    if (cost > capacity) {
      out.seconds_to_cost = kInfinity;
    } else if (tokens < cost) {
      out.seconds_to_cost = (cost - tokens) / rate;
    } else {
      out.seconds_to_cost = 0;
    }
    out.seconds_to_full = tokens < capacity ? (capacity - tokens) / rate : 0;
  }
  return decision;
}

std::int64_t system_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace sluice
