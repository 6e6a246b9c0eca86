#include "middleware/ratelimit/algorithms/quota.hpp"

#include <cmath>

namespace sluice {

double quota_period_end(const QuotaPeriods& p, std::int64_t now_us) {
  const double now = static_cast<double>(now_us);
  if (now < p.start_us) return p.start_us;
  if (now < p.end_us) return p.end_us;
  if (now < p.next_end_us) return p.next_end_us;
  const double len = p.next_end_us - p.end_us;
  return p.next_end_us + (std::floor((now - p.next_end_us) / len) + 1) * len;
}

QuotaUsage quota_usage(const BucketState& state, const QuotaPeriods& periods,
                       std::int64_t now_us) {
  QuotaUsage usage{0, quota_period_end(periods, now_us)};
  if (state.exists && static_cast<double>(state.timestamp_us) >= usage.end_us) {
    usage = QuotaUsage{state.tokens, static_cast<double>(state.timestamp_us)};
  }
  return usage;
}

std::int64_t quota_ttl_ms(double end_us, std::int64_t now_us) {
  return static_cast<std::int64_t>(std::floor((end_us - static_cast<double>(now_us)) / 1000)) +
         1000;
}

}  // namespace sluice
