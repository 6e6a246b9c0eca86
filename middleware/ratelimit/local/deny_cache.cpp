#include "middleware/ratelimit/local/deny_cache.hpp"

#include <algorithm>

#include "middleware/ratelimit/algorithms/algorithm.hpp"

namespace sluice {

void DenyCache::remember(std::span<const LimitDescriptor> buckets, double cost,
                         const RateDecision& decision, std::int64_t asked_us) {
  const std::size_t n = std::min(buckets.size(), decision.limits.size());
  double wait_s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const LimitState& s = decision.limits[i];
    if (s.sufficient || buckets[i].shadow) continue;
    // A denial that may end at any moment (a concurrency slot given back) is not kept.
    if (!algorithm_row(buckets[i]).caches_denials) return;
    wait_s = std::max(wait_s, s.seconds_to_cost);
  }
  if (!(wait_s > 0)) return;
  const double wait_us = std::min(wait_s * 1e6, static_cast<double>(kMaxEntryUs));
  for (std::size_t i = 0; i < n; ++i) {
    const LimitState& s = decision.limits[i];
    const double own_us = s.sufficient
                              ? wait_us
                              : std::min(s.seconds_to_cost * 1e6, wait_us);  // denied: its own wait
    // A shadow bucket never denies: it is only known.
    put(buckets[i],
        Entry{!s.sufficient && !buckets[i].shadow, cost, s.remaining, buckets[i].capacity,
              algorithm_row(buckets[i]).rate_or_window(buckets[i]), s.seconds_to_cost,
              s.seconds_to_full, asked_us, asked_us + static_cast<std::int64_t>(own_us)});
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
  if (bucket.capacity != e.capacity || algorithm_row(bucket).rate_or_window(bucket) != e.refill)
    return nullptr;
  return &e;
}

std::optional<LimitState> DenyCache::denied(const LimitDescriptor& bucket, double cost,
                                            std::int64_t now_us) {
  // A bucket that may be reserved, or never denies: ask the store.
  if (bucket.max_wait_seconds > 0 || bucket.shadow) return std::nullopt;
  const Entry* e = find(bucket, now_us);
  // A cheaper request may well pass: ask the store.
  if (e == nullptr || !e->denies || cost < e->cost) return std::nullopt;
  // An entry that would already have the tokens outlived its shortage: ask.
  const LimitState state = state_at(bucket, *e, cost, now_us);
  if (state.sufficient) return std::nullopt;
  return state;
}

std::optional<LimitState> DenyCache::known(const LimitDescriptor& bucket, double cost,
                                           std::int64_t now_us) {
  const Entry* e = find(bucket, now_us);
  if (e == nullptr) return std::nullopt;
  return state_at(bucket, *e, cost, now_us);
}

LimitState DenyCache::state_at(const LimitDescriptor& bucket, const Entry& e, double cost,
                               std::int64_t now_us) {
  if (!algorithm_row(bucket).refills) {
    // The waits the store reported, less the time since (the count it
    // reported is an upper bound).
    const double elapsed_s =
        static_cast<double>(std::max<std::int64_t>(now_us - e.asked_us, 0)) / 1e6;
    LimitState state;
    state.remaining = e.remaining;
    state.seconds_to_cost = std::max(0.0, e.to_cost - elapsed_s);
    state.seconds_to_full = std::max(0.0, e.to_full - elapsed_s);
    state.sufficient = !(state.seconds_to_cost > 0);
    return state;
  }
  const double tokens = refilled_tokens(bucket, e.remaining, now_us - e.asked_us);
  return local_state(bucket, tokens, cost, tokens >= cost);
}

std::size_t DenyCache::purge_expired(std::int64_t now_us) {
  const std::size_t gone = std::erase_if(
      entries_, [now_us](const auto& entry) { return entry.second.until_us <= now_us; });
  // An emptied table gives its bucket array back too.
  if (entries_.empty() && gone > 0) decltype(entries_)().swap(entries_);
  return gone;
}

}  // namespace sluice
