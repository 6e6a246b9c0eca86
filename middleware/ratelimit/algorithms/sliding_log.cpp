#include "middleware/ratelimit/algorithms/sliding_log.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sluice {

double log_units(double cost) {
  return std::ceil(cost);
}

void slide_log(BucketState& state, double window_seconds, std::int64_t now_us) {
  const double oldest_kept = static_cast<double>(now_us) - window_seconds * 1000000;
  auto& log = state.log;
  log.erase(log.begin(), std::upper_bound(log.begin(), log.end(), oldest_kept));
}

double log_seconds_to_cost(const BucketState& slid, double capacity, double window_seconds,
                           double units, std::int64_t now_us) {
  if (units > capacity) return std::numeric_limits<double>::infinity();
  const double count = static_cast<double>(slid.log.size());
  if (count + units <= capacity) return 0;
  // Units fit once the ceil(count + units - capacity) oldest entries have left.
  const auto k = static_cast<std::size_t>(std::ceil(count + units - capacity) - 1);
  return (slid.log[k] + window_seconds * 1000000 - static_cast<double>(now_us)) / 1000000;
}

double log_seconds_to_full(const BucketState& slid, double window_seconds, std::int64_t now_us) {
  if (slid.log.empty()) return 0;
  return (slid.log.back() + window_seconds * 1000000 - static_cast<double>(now_us)) / 1000000;
}

std::int64_t log_ttl_ms(double window_seconds) {
  return static_cast<std::int64_t>(std::ceil(window_seconds * 1000)) + 1000;
}

}  // namespace sluice
