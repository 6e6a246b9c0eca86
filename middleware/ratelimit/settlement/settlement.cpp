#include "middleware/ratelimit/settlement/settlement.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/ascii.hpp"
#include "common/spares.hpp"
#include "gateway/metrics.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "upstream/block_allocator.hpp"
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

double settled_cost(const CostFromResponse& settle, const ExchangeEnd& end, double estimate,
                    std::optional<double> body_usage) {
  if (end.status == 0) return estimate;  // no response: nothing is known
  if (!settle.counts(end.status)) return 0;
  if (end.usage) {
    if (auto header = parse_usage(*end.usage)) return *header;
  }
  return body_usage.value_or(estimate);
}

void append_debited(std::vector<LimitDescriptor>& out,
                    const std::vector<LimitDescriptor>& descriptors, const RateDecision& decision) {
  const std::size_t n = std::min(descriptors.size(), decision.limits.size());
  for (std::size_t i = 0; i < n; ++i) {
    const LimitDescriptor& d = descriptors[i];
    if (algorithm_row(d).counts_cost && !(d.shadow && !decision.limits[i].sufficient)) {
      out.push_back(d);
    }
  }
}

Settler::Settler(const Executor& executor, std::shared_ptr<RateLimiter> limiter,
                 MetricsShard& metrics)
    : executor_(executor),
      limiter_(std::move(limiter)),
      settlements_(metrics, "sluice_ratelimit_settlements_total", "route", "result"),
      settled_units_(metrics, "sluice_ratelimit_settled_units_total", "route", "direction"),
      body_usage_(metrics, "sluice_ratelimit_body_usage_total", "route", "result") {}

void Settler::settle(const std::string& route, std::span<const LimitDescriptor> debited,
                     double estimate, double real, double max_debt) {
  const double back = estimate - real;  // > 0: refunded, < 0: debited
  if (back == 0 || debited.empty()) return count(route, "even");
  // From the thread's block cache: a settlement per request allocates nothing once warm.
  auto whole = std::allocate_shared<Settlement>(BlockAllocator<Settlement>{});
  whole->route = route;
  whole->units = back;
  for (const LimitDescriptor& limit : debited) {
    pending_.push_back(Part{whole, BucketRefund{limit, back, max_debt}});
  }
  whole->parts_left = debited.size();  // every part is answered later, never inside settle()
  // While the worker stops, at once: the drain waits for calls in flight only.
  if (draining_ || limiter_->draining()) return flush();
  if (flush_posted_) return;
  boost::asio::post(executor_, [self = shared_from_this()] { self->flush(); });
  flush_posted_ = true;
}

void Settler::flush() {
  flush_posted_ = false;
  if (pending_.empty()) return;  // drain() sent them
  send(Batch{std::exchange(pending_, Spares<std::vector<Part>>::take())});
}

// One call for the batch where its outcome is each part's; else a call per
// part (asked at each sending: a reload may have changed the topology since
// the batch was parked).
void Settler::send(Batch batch) {
  if (batch.parts.size() > 1 && !limiter_->refunds_together()) {
    for (Part& part : batch.parts) {
      Batch one{{}, batch.attempts};
      one.parts.push_back(std::move(part));
      send(std::move(one));
    }
    return keep_spare(std::move(batch.parts));
  }
  ++batch.attempts;
  auto refunds = Spares<std::vector<BucketRefund>>::take();
  refunds.reserve(batch.parts.size());
  for (const Part& part : batch.parts) refunds.push_back(part.refund);
  limiter_->refund(std::move(refunds),
                   [self = shared_from_this(), batch = std::move(batch)](std::error_code ec) mutable {
                     self->sent(batch, ec);
                     keep_spare(std::move(batch.parts));  // (none left when parked)
                   });
}

void Settler::sent(Batch& batch, std::error_code ec) {
  const auto all = [&](PartOutcome outcome) {
    for (const Part& part : batch.parts) part_done(part, outcome);
  };
  if (!ec) return all(PartOutcome::kApplied);
  const std::size_t n = batch.parts.size();
  if (ec == redis::Error::kServer || ec == redis::Error::kNoScript) {
    // Redis answered with an error: the refund script did not run.
    spdlog::debug("{} settlement part(s) were refused: {}", n, ec.message());
    return all(PartOutcome::kFailed);
  }
  if (!never_reached_redis(ec)) {
    // A timeout or a lost connection: Redis may have applied them, or may yet.
    spdlog::debug("{} settlement part(s) may not have been applied: {}", n, ec.message());
    return all(PartOutcome::kUnknown);
  }
  if (batch.attempts >= kAttempts || draining_ || parked_parts_ + n > kMaxQueued) {
    spdlog::debug("{} settlement part(s) were dropped: {}", n, ec.message());
    return all(PartOutcome::kFailed);
  }
  park(std::move(batch));
}

// Sent again in a second.
void Settler::park(Batch batch) {
  const std::uint64_t id = next_park_id_++;
  auto timer = std::make_shared<boost::asio::steady_timer>(executor_, std::chrono::seconds(1));
  timer->async_wait([self = shared_from_this(), id](boost::system::error_code) {
    const auto it = self->parked_.find(id);
    if (it == self->parked_.end()) return;  // drain() sent it
    Batch waiting = std::move(it->second.batch);
    self->parked_.erase(it);
    self->parked_parts_ -= waiting.parts.size();
    self->send(std::move(waiting));
  });
  parked_parts_ += batch.parts.size();
  parked_.emplace(id, Parked{std::move(batch), std::move(timer)});
}

void Settler::drain() {
  draining_ = true;
  flush();
  auto parked = std::exchange(parked_, {});
  parked_parts_ = 0;
  for (auto& [id, waiting] : parked) {
    waiting.timer->cancel();
    send(std::move(waiting.batch));
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
