#include "middleware/ratelimit/redis/limiter_error.hpp"

#include <string>

#include "upstream/redis/error.hpp"

namespace sluice {
namespace {

class LimiterCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "sluice.limiter"; }
  std::string message(int ev) const override {
    switch (static_cast<LimiterError>(ev)) {
      case LimiterError::kCircuitOpen:
        return "redis circuit breaker open";
      case LimiterError::kBadReply:
        return "unexpected rate-limit script reply";
      case LimiterError::kPartlyApplied:
        return "refund partly applied: some slots' calls never reached redis";
    }
    return "limiter error";
  }
};

}  // namespace

std::error_code make_error_code(LimiterError e) noexcept {
  static const LimiterCategory category;
  return {static_cast<int>(e), category};
}

bool never_reached_redis(std::error_code ec) noexcept {
  using redis::Error;
  return ec == make_error_code(LimiterError::kCircuitOpen) || ec == Error::kNotConnected ||
         ec == Error::kConnect || ec == Error::kTls || ec == Error::kAuth;
}

}  // namespace sluice
