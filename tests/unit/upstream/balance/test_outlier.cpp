// Outlier detection's counting: runs of errors, the ejection's length, and
// the forgiveness of a server that stayed in.
#include <catch2/catch.hpp>

#include "upstream/balance/outlier.hpp"

namespace sluice {
namespace {

constexpr std::int64_t kMs = 1'000'000;  // ns

OutlierConfig config(unsigned five_xx, unsigned gateway) {
  OutlierConfig c;
  c.consecutive_5xx = five_xx;
  c.consecutive_gateway_errors = gateway;
  c.base_ejection = std::chrono::milliseconds(100);
  c.max_ejection = std::chrono::milliseconds(250);
  return c;
}

}  // namespace

TEST_CASE("outliers: a run of errors, ended by a success", "[outlier]") {
  OutlierState s;
  const auto c = config(3, 0);
  CHECK_FALSE(s.record(c, AttemptResult::kServerError));
  CHECK_FALSE(s.record(c, AttemptResult::kGatewayError));
  CHECK_FALSE(s.record(c, AttemptResult::kSuccess));  // the run starts again
  CHECK_FALSE(s.record(c, AttemptResult::kServerError));
  CHECK_FALSE(s.record(c, AttemptResult::kServerError));
  CHECK(s.record(c, AttemptResult::kGatewayError));
  CHECK(s.requests == 6);
  CHECK(s.errors == 5);
}

TEST_CASE("outliers: gateway errors in a row, broken by another 5xx", "[outlier]") {
  OutlierState s;
  const auto c = config(0, 2);  // 5xx runs not counted
  CHECK_FALSE(s.record(c, AttemptResult::kGatewayError));
  CHECK_FALSE(s.record(c, AttemptResult::kServerError));  // a 500 ends the gateway run
  CHECK_FALSE(s.record(c, AttemptResult::kGatewayError));
  CHECK(s.record(c, AttemptResult::kGatewayError));
}

TEST_CASE("outliers: each ejection in a row longer, capped, then forgiven", "[outlier]") {
  OutlierState s;
  const auto c = config(1, 0);
  std::int64_t now = 1'000 * kMs;
  CHECK(s.eject(c, now).count() == 100);
  CHECK(s.ejected(now + 99 * kMs));
  CHECK_FALSE(s.ejected(now + 100 * kMs));  // back by itself
  now += 150 * kMs;
  CHECK(s.eject(c, now).count() == 200);
  now += 250 * kMs;
  CHECK(s.eject(c, now).count() == 250);  // 300, capped
  CHECK(s.ejections_total == 3);
  // In for longer than max_ejection since the last one ended: a first one again.
  now += 250 * kMs + 251 * kMs;
  CHECK(s.eject(c, now).count() == 100);
  CHECK(s.ejected(now + kMs));
  s.forgive(now + kMs);  // an active check passed
  CHECK_FALSE(s.ejected(now + kMs));
  // Forgiven, not forgotten: the next ejection soon after is the second in a row.
  CHECK(s.eject(c, now + 2 * kMs).count() == 200);
}

}  // namespace sluice
