#include "middleware/ratelimit/concurrency/slot_keeper.hpp"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>

#include "common/spares.hpp"
#include "gateway/metrics.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"

namespace sluice {

SlotKeeper::SlotKeeper(const Executor& executor, std::shared_ptr<RateLimiter> limiter,
                       MetricsShard& metrics)
    : limiter_(std::move(limiter)),
      in_flight_(metrics, "sluice_ratelimit_in_flight", "limit"),
      releases_(metrics, "sluice_ratelimit_slot_releases_total", "result"),
      timer_(executor) {}

namespace {

// How often slots of this lease are renewed: every third of it (at least
// 100 ms), so that two renewals may fail before it runs out.
std::chrono::milliseconds renew_interval(double lease_ms) {
  return std::chrono::milliseconds(std::max<long long>(100, static_cast<long long>(lease_ms / 3)));
}

}  // namespace

void SlotKeeper::hold(std::span<const LimitDescriptor> taken) {
  for (const LimitDescriptor& slot : taken) {
    if (held_.emplace(slot.slot, slot).second) count(slot.limit, 1);
  }
  if (held_.empty()) return;
  // A slot with a shorter lease than those held so far is renewed on its
  // own schedule, not after the interval armed for the longer ones.
  bool sooner = !armed_;
  const auto now = Clock::now();
  for (const LimitDescriptor& slot : taken) {
    sooner = sooner || now + renew_interval(slot.lease_ms) < timer_.expiry();
  }
  if (sooner) arm();
}

void SlotKeeper::release(std::span<const LimitDescriptor> taken) {
  for (const LimitDescriptor& slot : taken) {
    if (held_.erase(slot.slot) == 0) continue;  // given back already
    count(slot.limit, -1);
    releasing_.push_back(BucketRefund{slot, 1});
  }
  if (releasing_.empty()) return;
  // While the worker stops, at once: the drain waits for calls in flight only.
  if (limiter_->draining()) return flush();
  if (flush_posted_) return;
  boost::asio::post(timer_.get_executor(), [self = shared_from_this()] { self->flush(); });
  flush_posted_ = true;
}

// One call on one Redis; on a Redis Cluster one per slot released, so that
// each is counted (and sent again) by its own outcome.
void SlotKeeper::flush() {
  flush_posted_ = false;
  if (releasing_.empty()) return;
  auto releases = std::exchange(releasing_, Spares<std::vector<BucketRefund>>::take());
  if (releases.size() == 1 || limiter_->refunds_together()) {
    return give_back(std::move(releases), 1, false);
  }
  for (BucketRefund& release : releases) give_back({std::move(release)}, 1, false);
  keep_spare(std::move(releases));
}

// A release is the removal of the slot's own member (its number is unique in
// the fleet): sent again, it changes nothing more. So one whose answer never
// came (Redis may or may not have run it) is sent again like one that never
// reached Redis, a second apart; a slot still not given back after the last
// attempt ends with its lease.
void SlotKeeper::give_back(std::vector<BucketRefund> releases, int attempt, bool reached) {
  // One copy, kept for a retry; the list itself goes to the limiter.
  std::vector<BucketRefund> kept = releases;
  limiter_->refund(
      std::move(releases),
      [weak = weak_from_this(), releases = std::move(kept), attempt, reached](
          std::error_code ec) mutable {
        auto self = weak.lock();
        if (!self) return;
        const auto n = static_cast<double>(releases.size());
        if (!ec) return self->count_releases("released", n);
        // Whether some attempt may have freed the slots after all.
        reached = reached || !never_reached_redis(ec);
        if (attempt >= kReleaseAttempts)
          return self->count_releases(reached ? "unknown" : "failed", n);
        auto timer =
            std::make_shared<boost::asio::steady_timer>(self->timer_.get_executor(), kReleaseRetry);
        timer->async_wait([weak, timer, releases = std::move(releases), attempt,
                           reached](boost::system::error_code) mutable {
          if (auto keeper = weak.lock())
            keeper->give_back(std::move(releases), attempt + 1, reached);
        });
      });
}

void SlotKeeper::count_releases(std::string_view result, double n) { releases_.add(result, n); }

// Every third of the shortest lease held (at least 100 ms); an earlier wait
// still pending is replaced.
void SlotKeeper::arm() {
  double shortest_ms = 0;
  for (const auto& [_, slot] : held_) {
    if (shortest_ms == 0 || slot.lease_ms < shortest_ms) shortest_ms = slot.lease_ms;
  }
  armed_ = true;
  const std::uint64_t generation = ++generation_;
  timer_.expires_after(renew_interval(shortest_ms));  // cancels the pending wait
  timer_.async_wait([weak = weak_from_this(), generation](boost::system::error_code ec) {
    auto self = weak.lock();
    if (!self || generation != self->generation_) return;  // replaced by a later arm()
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

}  // namespace sluice
