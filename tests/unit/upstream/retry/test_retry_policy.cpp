// The retry policy's decisions and the budget's arithmetic, on their own.
#include <catch2/catch.hpp>

#include <limits>

#include "upstream/retry/retry_budget.hpp"
#include "upstream/retry/retry_policy.hpp"

namespace sluice {

TEST_CASE("retry: the causes a policy names", "[retry]") {
  RetryPolicy p;
  CHECK_FALSE(p.retries(RetryCause::kStatus503));
  p.allow(RetryCause::kStatus503);
  p.allow(RetryCause::kConnectFailure);
  CHECK(p.retries(RetryCause::kStatus503));
  CHECK(p.retries(RetryCause::kConnectFailure));
  CHECK_FALSE(p.retries(RetryCause::kStatus502));
  RetryCause c{};
  CHECK(status_cause(503, -1, c));
  CHECK(c == RetryCause::kStatus503);
  CHECK_FALSE(status_cause(500, -1, c));
  CHECK_FALSE(status_cause(200, 0, c));
  CHECK(status_cause(200, 14, c));  // a gRPC trailers-only UNAVAILABLE
  CHECK(c == RetryCause::kGrpcUnavailable);
}

TEST_CASE("retry: backoff grows, is capped and jittered over the whole range", "[retry]") {
  RetryPolicy p;
  p.backoff_base = std::chrono::milliseconds(25);
  p.backoff_max = std::chrono::milliseconds(250);
  const auto top = std::numeric_limits<std::uint64_t>::max();
  CHECK(retry_backoff(p, 1, 0).count() == 0);
  CHECK(retry_backoff(p, 1, top).count() == 25);
  CHECK(retry_backoff(p, 2, top).count() == 50);
  CHECK(retry_backoff(p, 3, top).count() == 100);
  CHECK(retry_backoff(p, 4, top).count() == 200);
  CHECK(retry_backoff(p, 5, top).count() == 250);
  CHECK(retry_backoff(p, 60, top).count() == 250);  // no overflow
  CHECK(retry_backoff(p, 3, top / 2).count() == 50);
  p.backoff_max = std::chrono::milliseconds(0);
  CHECK(retry_backoff(p, 3, top).count() == 0);
}

TEST_CASE("retry budget: a share of the requests in flight, or the minimum", "[retry]") {
  RetryBudget b;
  const RetryBudgetConfig c{20, 2};
  for (int i = 0; i < 5; ++i) b.request_started();
  CHECK(b.try_start_retry(c));  // min 2 > 20 % of 5
  CHECK(b.try_start_retry(c));
  CHECK_FALSE(b.try_start_retry(c));
  for (int i = 0; i < 15; ++i) b.request_started();  // 20 in flight: 4 retries
  CHECK(b.try_start_retry(c));
  CHECK(b.try_start_retry(c));
  CHECK_FALSE(b.try_start_retry(c));
  b.retry_ended();
  CHECK(b.try_start_retry(c));
  CHECK(b.retries() == 4);
  for (int i = 0; i < 30; ++i) b.request_ended();  // never below zero
  CHECK(b.requests() == 0);
}

}  // namespace sluice
