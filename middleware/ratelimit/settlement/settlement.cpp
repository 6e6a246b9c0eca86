#include "middleware/ratelimit/settlement/settlement.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/steady_timer.hpp>

#include "common/ascii.hpp"
#include "gateway/metrics.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "upstream/redis/error.hpp"

namespace sluice {

namespace {

constexpr std::uint64_t kMaxUsage = std::uint64_t{1} << 53;

}  // namespace

std::optional<double> parse_usage(std::string_view text) {
  text = ascii::trim(text);
  if (text.empty() || !ascii::all_digits(text)) return std::nullopt;
  // Leading zeros say nothing ("007"), however many: the value's own digits
  // are counted.
  text.remove_prefix(std::min(text.find_first_not_of('0'), text.size() - 1));
  if (text.size() > 16) return std::nullopt;
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
    : executor_(executor),
      limiter_(std::move(limiter)),
      settlements_(metrics, "sluice_ratelimit_settlements_total", "route", "result"),
      settled_units_(metrics, "sluice_ratelimit_settled_units_total", "route", "direction") {}

void Settler::settle(const std::string& route, const std::vector<LimitDescriptor>& descriptors,
                     const RateDecision& decision, double estimate, double real, double max_debt) {
  const double back = estimate - real;  // > 0: refunded, < 0: debited
  if (back == 0) return count(route, "even");
  const std::size_t n = std::min(descriptors.size(), decision.limits.size());
  // What the request debited: every enforced limit, a shadow one that had
  // room; a concurrency limit took a slot, not the cost.
  const auto debited = [&](std::size_t i) {
    const LimitDescriptor& d = descriptors[i];
    return algorithm_row(d).counts_cost && !(d.shadow && !decision.limits[i].sufficient);
  };
  std::size_t parts = 0;
  for (std::size_t i = 0; i < n; ++i) parts += debited(i) ? 1 : 0;
  if (parts == 0) return count(route, "even");
  auto whole = std::make_shared<Settlement>();
  whole->route = route;
  whole->units = back;
  whole->parts_left = parts;  // every part is answered later, never inside send()
  for (std::size_t i = 0; i < n; ++i) {
    if (!debited(i)) continue;
    send(std::make_shared<Part>(Part{whole, BucketRefund{descriptors[i], back, max_debt}}));
  }
}

void Settler::send(std::shared_ptr<Part> part) {
  ++part->attempts;
  limiter_->refund({part->refund}, [self = shared_from_this(), part](std::error_code ec) {
    if (!ec) return self->part_done(*part, PartOutcome::kApplied);
    if (ec == redis::Error::kServer || ec == redis::Error::kNoScript) {
      // Redis answered with an error: the refund script did not run.
      spdlog::debug("a settlement of route {} was refused: {}", part->whole->route, ec.message());
      return self->part_done(*part, PartOutcome::kFailed);
    }
    if (!never_reached_redis(ec)) {
      // A timeout or a lost connection: Redis may have applied it, or may yet.
      spdlog::debug("a settlement of route {} may not have been applied: {}", part->whole->route,
                    ec.message());
      return self->part_done(*part, PartOutcome::kUnknown);
    }
    if (part->attempts >= kAttempts || self->draining_ || self->parked_.size() >= kMaxQueued) {
      spdlog::debug("a settlement of route {} was dropped: {}", part->whole->route, ec.message());
      return self->part_done(*part, PartOutcome::kFailed);
    }
    self->park(std::move(part));
  });
}

// Sent again in a second.
void Settler::park(std::shared_ptr<Part> part) {
  const std::uint64_t id = next_park_id_++;
  auto timer = std::make_shared<boost::asio::steady_timer>(executor_, std::chrono::seconds(1));
  timer->async_wait([self = shared_from_this(), id](boost::system::error_code) {
    const auto it = self->parked_.find(id);
    if (it == self->parked_.end()) return;  // drain() sent it
    auto waiting = std::move(it->second.part);
    self->parked_.erase(it);
    self->send(std::move(waiting));
  });
  parked_.emplace(id, Parked{std::move(part), std::move(timer)});
}

void Settler::drain() {
  draining_ = true;
  auto parked = std::exchange(parked_, {});
  for (auto& [id, waiting] : parked) {
    waiting.timer->cancel();
    send(std::move(waiting.part));
  }
}

void Settler::part_done(const Part& part, PartOutcome outcome) {
  Settlement& whole = *part.whole;
  whole.outcome = std::max(whole.outcome, outcome);
  if (--whole.parts_left > 0) return;
  if (whole.outcome == PartOutcome::kFailed) return count(whole.route, "failed");
  if (whole.outcome == PartOutcome::kUnknown) return count(whole.route, "unknown");
  const std::string_view direction = whole.units > 0 ? "refund" : "debit";
  count(whole.route, direction);
  settled_units_.add(whole.route, direction, std::fabs(whole.units));
}

void Settler::count(const std::string& route, std::string_view result) {
  settlements_.add(route, result);
}

}  // namespace sluice
