#include "upstream/redis/backoff.hpp"

#include <algorithm>
#include <cstdint>

namespace sluice::redis {

Backoff::Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max, unsigned seed)
    : initial_(initial), max_(max), rng_(seed) {}

std::chrono::milliseconds Backoff::next() {
  const auto initial = std::max<std::int64_t>(initial_.count(), 0);
  const auto cap = std::max<std::int64_t>(max_.count(), initial);
  const unsigned shift = std::min(attempt_, 20u);
  const std::int64_t delay = std::min(cap, initial << shift);
  ++attempt_;
  if (delay <= 1) return std::chrono::milliseconds(delay);
  std::uniform_int_distribution<std::int64_t> jitter(delay / 2, delay);
  return std::chrono::milliseconds(jitter(rng_));
}

}  // namespace sluice::redis
