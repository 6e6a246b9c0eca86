#include "middleware/ratelimit/local/deny_cache.hpp"

#include <algorithm>

namespace sluice {

void DenyCache::remember(std::span<const LimitDescriptor> buckets, double cost,
                         const RateDecision& decision, std::int64_t asked_us) {
  const std::size_t n = std::min(buckets.size(), decision.limits.size());
  double wait_s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const LimitState& s = decision.limits[i];
    if (!s.sufficient) wait_s = std::max(wait_s, s.seconds_to_cost);
  }
  if (!(wait_s > 0)) return;
  const double wait_us = std::min(wait_s * 1e6, static_cast<double>(kMaxEntryUs));
  for (std::size_t i = 0; i < n; ++i) {
    const LimitState& s = decision.limits[i];
    const double own_us = s.sufficient
                              ? wait_us
                              : std::min(s.seconds_to_cost * 1e6, wait_us);  // denied: its own wait
    put(buckets[i],
        Entry{!s.sufficient, cost, s.remaining, buckets[i].capacity, buckets[i].refill_per_second,
              asked_us, asked_us + static_cast<std::int64_t>(own_us)});
  }
}

void DenyCache::put(const LimitDescriptor& bucket, const Entry& entry) {
  auto it = entries_.find(BucketKey::of(bucket));
  if (it != entries_.end()) {
    it->second = entry;
    return;
  }
  if (entries_.size() >= max_entries_ && entry.asked_us - last_purge_us_ >= kPurgeIntervalUs) {
    last_purge_us_ = entry.asked_us;  // a full cache is swept at most once an interval
    purge_expired(entry.asked_us);
  }
  if (entries_.size() >= max_entries_) return;
  entries_.emplace(BucketKey::of(bucket), entry);
}

const DenyCache::Entry* DenyCache::find(const LimitDescriptor& bucket, std::int64_t now_us) {
  if (entries_.empty()) return nullptr;
  auto it = entries_.find(BucketKey::of(bucket));
  if (it == entries_.end()) return nullptr;
  const Entry& e = it->second;
  if (now_us >= e.until_us) {
    entries_.erase(it);
    return nullptr;
  }
  // Decided with other parameters (another plan): nothing is known.
  if (bucket.capacity != e.capacity || bucket.refill_per_second != e.refill) return nullptr;
  return &e;
}

std::optional<LimitState> DenyCache::denied(const LimitDescriptor& bucket, double cost,
                                            std::int64_t now_us) {
  const Entry* e = find(bucket, now_us);
  // A cheaper request may well pass: ask the store.
  if (e == nullptr || !e->denies || cost < e->cost) return std::nullopt;
  const double tokens = refilled_tokens(bucket, e->remaining, now_us - e->asked_us);
  return local_state(bucket, tokens, cost, false);
}

std::optional<LimitState> DenyCache::known(const LimitDescriptor& bucket, double cost,
                                           std::int64_t now_us) {
  const Entry* e = find(bucket, now_us);
  if (e == nullptr) return std::nullopt;
  const double tokens = refilled_tokens(bucket, e->remaining, now_us - e->asked_us);
  return local_state(bucket, tokens, cost, tokens >= cost);
}

void DenyCache::purge_expired(std::int64_t now_us) {
  std::erase_if(entries_, [now_us](const auto& entry) { return entry.second.until_us <= now_us; });
}

}  // namespace sluice
