// The retry budget of one upstream on one worker (upstreams.NAME.
// retry_budget): retries in flight at most `percent` of the requests in
// flight, or `min_concurrent`, whichever is more (Envoy's retry budget,
// Linkerd's ratio), so that when every server fails, retries add at most a
// fixed share of load instead of multiplying it. Used on the worker's thread
// only; the counts are the worker's.
#pragma once

#include <algorithm>
#include <cstddef>

namespace sluice {

struct RetryBudgetConfig {
  double percent = 20;          // of the requests in flight
  std::size_t min_concurrent = 3;  // retries in flight allowed whatever the load
  bool operator==(const RetryBudgetConfig&) const = default;
};

class RetryBudget {
 public:
  void request_started() { ++requests_; }
  void request_ended() {
    if (requests_ > 0) --requests_;
  }
  // A retry may start now (and is counted until retry_ended); false: the
  // budget is spent, the request fails as it is.
  bool try_start_retry(const RetryBudgetConfig& config) {
    const auto share = static_cast<std::size_t>(config.percent / 100.0 * requests_);
    if (retries_ >= std::max(share, config.min_concurrent)) return false;
    ++retries_;
    return true;
  }
  void retry_ended() {
    if (retries_ > 0) --retries_;
  }
  std::size_t requests() const { return requests_; }
  std::size_t retries() const { return retries_; }

 private:
  std::size_t requests_ = 0;
  std::size_t retries_ = 0;
};

}  // namespace sluice
