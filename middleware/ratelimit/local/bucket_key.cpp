#include "middleware/ratelimit/local/bucket_key.hpp"

#include <algorithm>
#include <limits>

namespace sluice {

double refilled_tokens(const LimitDescriptor& bucket, double tokens, std::int64_t elapsed_us) {
  const double refill =
      static_cast<double>(std::max<std::int64_t>(elapsed_us, 0)) * bucket.refill_per_second / 1e6;
  return std::min(bucket.capacity, tokens + refill);
}

LimitState local_state(const LimitDescriptor& bucket, double tokens, double cost, bool sufficient) {
  LimitState state;
  state.sufficient = sufficient;
  state.remaining = tokens;
  const double rate = bucket.refill_per_second;
  if (cost > bucket.capacity) {
    state.seconds_to_cost = std::numeric_limits<double>::infinity();
  } else if (tokens < cost) {
    state.seconds_to_cost = (cost - tokens) / rate;
  }
  state.seconds_to_full = tokens < bucket.capacity ? (bucket.capacity - tokens) / rate : 0;
  return state;
}

}  // namespace sluice
