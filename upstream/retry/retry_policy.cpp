#include "upstream/retry/retry_policy.hpp"

#include <algorithm>

#include "upstream/balance/stable_hash.hpp"

namespace sluice {

std::chrono::milliseconds retry_backoff(const RetryPolicy& policy, unsigned retry,
                                        std::uint64_t draw) {
  if (retry == 0 || policy.backoff_max.count() <= 0) return std::chrono::milliseconds(0);
  // base * 2^(retry-1), without overflowing: past the cap it is the cap.
  std::int64_t ceiling = policy.backoff_base.count();
  for (unsigned i = 1; i < retry && ceiling < policy.backoff_max.count(); ++i) ceiling *= 2;
  ceiling = std::min<std::int64_t>(ceiling, policy.backoff_max.count());
  if (ceiling <= 0) return std::chrono::milliseconds(0);
  const auto span = static_cast<std::uint64_t>(ceiling) + 1;  // [0, ceiling] inclusive
  return std::chrono::milliseconds(static_cast<std::int64_t>(scale_draw(draw, span)));
}

bool status_cause(unsigned status, int grpc_status, RetryCause& cause) {
  switch (status) {
    case 502:
      cause = RetryCause::kStatus502;
      return true;
    case 503:
      cause = RetryCause::kStatus503;
      return true;
    case 504:
      cause = RetryCause::kStatus504;
      return true;
    default:
      break;
  }
  if (grpc_status == 14) {  // UNAVAILABLE
    cause = RetryCause::kGrpcUnavailable;
    return true;
  }
  return false;
}

}  // namespace sluice
