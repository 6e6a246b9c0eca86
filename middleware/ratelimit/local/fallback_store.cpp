#include "middleware/ratelimit/local/fallback_store.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/descriptors.hpp"

namespace sluice {

bool FallbackStore::refilled_to_share(const Entry& e, std::int64_t now) {
  return algorithm_row(e.share).spent(e.state, e.share, now);
}

FallbackStore::FallbackStore(std::size_t max_buckets, Clock now_us)
    : now_us_(std::move(now_us)), max_buckets_(std::max<std::size_t>(max_buckets, 1)) {}

unsigned FallbackStore::fleet_size() const {
  const unsigned configured = configured_fleet_size_.load(std::memory_order_relaxed);
  if (configured > 0) return configured;
  const unsigned learned = learned_fleet_size_.load(std::memory_order_relaxed);
  return std::clamp(learned, 1u,
                    std::max(max_learned_fleet_size_.load(std::memory_order_relaxed), 1u));
}

void FallbackStore::set_max_learned_fleet_size(unsigned n) {
  max_learned_fleet_size_.store(n, std::memory_order_relaxed);
}

void FallbackStore::set_configured_fleet_size(unsigned n) {
  configured_fleet_size_.store(n, std::memory_order_relaxed);
}

void FallbackStore::set_learned_fleet_size(unsigned n) {
  if (n > 0) learned_fleet_size_.store(n, std::memory_order_relaxed);
}

RateDecision FallbackStore::decide(std::span<const LimitDescriptor> limits, double cost) {
  // This instance's share of each limit; a lease means nothing here.
  const double n = fleet_size();
  std::vector<LimitDescriptor> shares(limits.begin(), limits.end());
  std::vector<std::string> names;
  names.reserve(shares.size());
  for (auto& share : shares) {
    share.capacity /= n;
    share.refill_per_second /= n;
    share.lease_want = 0;
    // A slot this process admitted is given back when its exchange ends (end
    // hooks run once, whatever the end): it needs no lease, and none runs out
    // under a request still going.
    if (share.algorithm == LimitAlgorithm::kConcurrency) {
      share.lease_ms = std::numeric_limits<double>::infinity();
    }
    names.push_back(bucket_name(share));
  }

  std::lock_guard lock(mutex_);
  // Gather the held states (touching them), decide, and write back on a debit.
  std::vector<BucketState> states(shares.size());
  std::vector<Lru::iterator> held(shares.size(), lru_.end());
  for (std::size_t i = 0; i < shares.size(); ++i) {
    auto it = index_.find(names[i]);
    if (it == index_.end()) continue;
    held[i] = it->second;
    lru_.splice(lru_.begin(), lru_, held[i]);
    states[i] = held[i]->state;
  }
  last_decided_us_ = now_us_();
  RateDecision decision = decide_limits(states, shares, cost, last_decided_us_);
  decision.local = LocalDecision::kFallback;
  if (!decision.allowed) return decision;
  for (std::size_t i = 0; i < shares.size(); ++i) {
    if (held[i] != lru_.end()) {
      held[i]->state = states[i];
      held[i]->share = shares[i];
      continue;
    }
    // A bucket named twice in one request is inserted once.
    auto [it, inserted] = index_.try_emplace(names[i], lru_.end());
    if (inserted) {
      lru_.push_front(Entry{names[i], {}});
      it->second = lru_.begin();
    }
    it->second->state = states[i];
    it->second->share = shares[i];
  }
  evict_over_bound();
  used_.store(true, std::memory_order_release);
  return decision;
}

void FallbackStore::set_max_buckets(std::size_t max_buckets) {
  std::lock_guard lock(mutex_);
  max_buckets_ = std::max<std::size_t>(max_buckets, 1);
  evict_over_bound();
}

void FallbackStore::evict_over_bound() {
  while (lru_.size() > max_buckets_) {
    index_.erase(lru_.back().name);
    lru_.pop_back();
  }
}

void FallbackStore::release_slots(std::span<const LimitDescriptor> slots) {
  std::lock_guard lock(mutex_);
  for (const auto& slot : slots) {
    auto it = index_.find(bucket_name(slot));
    if (it == index_.end()) continue;  // forgotten (Redis decides again) or evicted
    auto& ends = it->second->state.log;  // held slots, none ending: any one is the slot
    if (!ends.empty()) ends.pop_back();
  }
}

void FallbackStore::clear() {
  std::lock_guard lock(mutex_);
  index_.clear();
  lru_.clear();
  used_.store(false, std::memory_order_release);
}

void FallbackStore::forget(std::span<const LimitDescriptor> buckets) {
  std::lock_guard lock(mutex_);
  const std::int64_t now = now_us_();
  if (now - last_decided_us_ >= kQuietUs) {
    for (auto it = lru_.begin(); it != lru_.end();) {
      if (refilled_to_share(*it, now)) {
        index_.erase(it->name);
        it = lru_.erase(it);
      } else {
        ++it;
      }
    }
  } else {
    for (const auto& bucket : buckets) {
      auto it = index_.find(bucket_name(bucket));
      if (it == index_.end()) continue;
      lru_.erase(it->second);
      index_.erase(it);
    }
  }
  used_.store(!lru_.empty(), std::memory_order_release);
}

std::size_t FallbackStore::size() const {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

BucketState FallbackStore::state(const LimitDescriptor& bucket) const {
  std::lock_guard lock(mutex_);
  auto it = index_.find(bucket_name(bucket));
  return it == index_.end() ? BucketState{} : it->second->state;
}

}  // namespace sluice
