#include "middleware/ratelimit/settlement/settlement.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>

#include <spdlog/spdlog.h>
#include <boost/asio/steady_timer.hpp>

#include "common/ascii.hpp"
#include "gateway/metrics.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"

namespace sluice {

namespace {

constexpr std::uint64_t kMaxUsage = std::uint64_t{1} << 53;

}  // namespace

std::optional<double> parse_usage(std::string_view text) {
  text = ascii::trim(text);
  if (text.empty() || text.size() > 16 || !ascii::all_digits(text)) return std::nullopt;
  std::uint64_t value = 0;  // 16 digits at most: no overflow
  for (char c : text) value = value * 10 + static_cast<std::uint64_t>(c - '0');
  if (value > kMaxUsage) return std::nullopt;
  return static_cast<double>(value);
}

double settled_cost(const CostFromResponse& settle, const ExchangeEnd& end, double estimate) {
  if (end.status == 0) return estimate;  // no response: nothing is known
  if (!settle.counts(end.status)) return 0;
  if (!end.usage) return estimate;
  return parse_usage(*end.usage).value_or(estimate);
}

Settler::Settler(const Executor& executor, std::shared_ptr<RateLimiter> limiter,
                 MetricsShard& metrics)
    : executor_(executor), limiter_(std::move(limiter)), metrics_(metrics) {}

void Settler::settle(const std::string& route, const std::vector<LimitDescriptor>& descriptors,
                     const RateDecision& decision, double estimate, double real,
                     double max_debt) {
  const double back = estimate - real;  // > 0: refunded, < 0: debited
  if (back == 0) return count(route, "even");
  auto pending = std::make_shared<Pending>();
  pending->route = route;
  const std::size_t n = std::min(descriptors.size(), decision.limits.size());
  for (std::size_t i = 0; i < n; ++i) {
    const LimitDescriptor& d = descriptors[i];
    // What the request debited: every enforced limit, a shadow one that had
    // room; a concurrency limit took a slot, not the cost.
    if (!algorithm_row(d).counts_cost || (d.shadow && !decision.limits[i].sufficient)) continue;
    pending->refunds.push_back(BucketRefund{d, back, max_debt});
  }
  if (pending->refunds.empty()) return count(route, "even");
  pending->units = back;
  send(std::move(pending));
}

void Settler::send(std::shared_ptr<Pending> pending) {
  ++pending->attempts;
  auto refunds = pending->refunds;
  limiter_->refund(std::move(refunds), [self = shared_from_this(),
                                        pending](std::error_code ec) {
    if (!ec) {
      const std::string_view direction = pending->units > 0 ? "refund" : "debit";
      self->count(pending->route, direction);
      self->metrics_.add("sluice_ratelimit_settled_units_total",
                         scratch_labels({{"route", pending->route}, {"direction", direction}}),
                         std::fabs(pending->units));
      return;
    }
    if (pending->attempts >= kAttempts || self->queued_ >= kMaxQueued) {
      spdlog::debug("a settlement of route {} was dropped: {}", pending->route, ec.message());
      return self->count(pending->route, "failed");
    }
    ++self->queued_;
    auto timer = std::make_shared<boost::asio::steady_timer>(self->executor_,
                                                             std::chrono::seconds(1));
    timer->async_wait([self, pending, timer](boost::system::error_code) {
      --self->queued_;
      self->send(pending);
    });
  });
}

void Settler::count(const std::string& route, std::string_view result) {
  metrics_.add("sluice_ratelimit_settlements_total",
               scratch_labels({{"route", route}, {"result", result}}));
}

}  // namespace sluice
