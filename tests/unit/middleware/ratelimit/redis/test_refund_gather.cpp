// A refund sent as several calls (one per hash slot): what its sender is told,
// so that it is sent again only when none of it was applied.
#include <catch2/catch.hpp>

#include <optional>
#include <system_error>

#include "middleware/ratelimit/redis/limiter_error.hpp"
#include "middleware/ratelimit/redis/refund_gather.hpp"
#include "upstream/redis/error.hpp"

namespace refund_gather_test {

using namespace sluice;

std::optional<std::error_code> gathered(std::initializer_list<std::error_code> calls) {
  std::optional<std::error_code> told;
  RefundGather gather([&](std::error_code ec) { told = ec; });
  gather.waiting = calls.size();
  for (const std::error_code ec : calls) {
    CHECK_FALSE(told);  // told once, after the last call
    gather.counted(ec);
  }
  return told;
}

TEST_CASE("refund gather: sent again only when no call of it was applied", "[refund][unit]") {
  const auto unsent = redis::make_error_code(redis::Error::kNotConnected);
  const auto timeout = redis::make_error_code(redis::Error::kTimeout);
  const auto open = make_error_code(LimiterError::kCircuitOpen);
  CHECK(gathered({{}, {}}) == std::error_code{});
  // None reached Redis: the first such error, and the whole may go again.
  CHECK(gathered({unsent, open}) == unsent);
  CHECK(never_reached_redis(*gathered({unsent, open})));
  // One applied, one never sent: partly applied, never sent again.
  const auto partly = gathered({{}, unsent});
  CHECK(partly == make_error_code(LimiterError::kPartlyApplied));
  CHECK_FALSE(never_reached_redis(*partly));
  CHECK(gathered({unsent, {}}) == make_error_code(LimiterError::kPartlyApplied));
  // A call that may have been applied decides, wherever it comes.
  CHECK(gathered({unsent, timeout}) == timeout);
  CHECK(gathered({timeout, unsent, {}}) == timeout);
}

}  // namespace refund_gather_test
