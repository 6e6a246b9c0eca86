#include "middleware/ratelimit/concurrency/slot_keeper.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "gateway/metrics.hpp"

namespace sluice {

SlotKeeper::SlotKeeper(const Executor& executor, std::shared_ptr<RateLimiter> limiter,
                       MetricsShard& metrics)
    : limiter_(std::move(limiter)), metrics_(metrics), timer_(executor) {}

void SlotKeeper::hold(std::span<const LimitDescriptor> taken) {
  for (const LimitDescriptor& slot : taken) {
    if (held_.emplace(slot.slot, slot).second) count(slot.limit, 1);
  }
  if (!armed_ && !held_.empty()) arm();
}

void SlotKeeper::release(std::span<const LimitDescriptor> taken) {
  std::vector<BucketRefund> refunds;
  for (const LimitDescriptor& slot : taken) {
    if (held_.erase(slot.slot) == 0) continue;  // given back already
    count(slot.limit, -1);
    refunds.push_back(BucketRefund{slot, 1});
  }
  if (!refunds.empty()) limiter_->refund(std::move(refunds), nullptr);
}

// Every third of the shortest lease held (at least 100 ms).
void SlotKeeper::arm() {
  double shortest_ms = 0;
  for (const auto& [_, slot] : held_) {
    if (shortest_ms == 0 || slot.lease_ms < shortest_ms) shortest_ms = slot.lease_ms;
  }
  armed_ = true;
  timer_.expires_after(std::chrono::milliseconds(
      std::max<long long>(100, static_cast<long long>(shortest_ms / 3))));
  timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (!self) return;
    self->armed_ = false;
    if (ec) return;
    self->renew_all();
  });
}

void SlotKeeper::renew_all() {
  if (held_.empty()) return;
  std::vector<LimitDescriptor> slots;
  slots.reserve(held_.size());
  for (const auto& [_, slot] : held_) slots.push_back(slot);
  limiter_->renew(std::move(slots), nullptr);
  arm();
}

void SlotKeeper::count(const std::string& limit, double delta) {
  auto it = in_flight_.try_emplace(limit, 0).first;
  it->second += delta;
  metrics_.set("sluice_ratelimit_in_flight", scratch_labels({{"limit", limit}}), it->second);
}

}  // namespace sluice
