#include "middleware/ratelimit/algorithms/quota.hpp"

#include <cmath>
#include <limits>

namespace sluice {

double quota_period_end(const QuotaPeriods& p, std::int64_t now_us) {
  const double now = static_cast<double>(now_us);
  if (now >= p.start_us && now < p.end_us) return p.end_us;
  if (now >= p.end_us && now < p.next_end_us) return p.next_end_us;
  return std::numeric_limits<double>::quiet_NaN();
}

QuotaUsage quota_usage(const BucketState& state, const QuotaPeriods& periods, std::int64_t now_us) {
  QuotaUsage usage{0, quota_period_end(periods, now_us)};
  if (!state.exists) return usage;
  const double stored_end = static_cast<double>(state.timestamp_us);
  const bool stepped_back = stored_end == periods.next_end_us && usage.end_us == periods.end_us &&
                            periods.end_us - static_cast<double>(now_us) <= 1e6;
  if (stored_end == usage.end_us || stepped_back) usage = QuotaUsage{state.tokens, stored_end};
  return usage;
}

std::int64_t quota_ttl_ms(double end_us, std::int64_t now_us) {
  return static_cast<std::int64_t>(std::floor((end_us - static_cast<double>(now_us)) / 1000)) +
         1000;
}

}  // namespace sluice
