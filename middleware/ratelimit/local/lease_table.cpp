#include "middleware/ratelimit/local/lease_table.hpp"

#include <algorithm>
#include <cmath>

namespace sluice {

double lease_size(double rate, double max_tokens, double cost) {
  if (rate < LeaseTable::kMinRate || max_tokens < cost) return 0;
  const double wanted =
      std::floor(std::min(max_tokens, rate * cost * LeaseTable::kHorizonUs / 1e6));
  return wanted >= cost ? wanted : 0;
}

std::int64_t lease_lifetime_us(double remaining_after, double capacity) {
  if (!(capacity > 0) || remaining_after * 2 >= capacity) return LeaseTable::kMaxLifetimeUs;
  const double share = std::max(remaining_after, 0.0) * 2 / capacity;  // 0..1
  const auto lifetime = static_cast<std::int64_t>(share * LeaseTable::kMaxLifetimeUs);
  return std::max(lifetime, LeaseTable::kMinLifetimeUs);
}

LeaseTable::Entry* LeaseTable::touch(const LimitDescriptor& bucket, std::int64_t now_us) {
  auto it = entries_.find(BucketKey::of(bucket));
  if (it == entries_.end()) {
    if (entries_.size() >= max_entries_ && now_us - last_full_sweep_us_ >= kWindowUs) {
      last_full_sweep_us_ = now_us;  // a full table is swept at most once a window
      drop_idle(now_us);
    }
    if (entries_.size() >= max_entries_) return nullptr;  // full: this bucket is not leased
    Entry fresh;
    fresh.bucket = bucket;
    fresh.window_start_us = now_us;
    it = entries_.emplace(BucketKey::of(bucket), std::move(fresh)).first;
  }
  Entry& e = it->second;
  const std::int64_t window = now_us - e.window_start_us;
  if (window >= kWindowUs || (e.window_count >= kEarlyCount && window >= kMinWindowUs)) {
    e.rate = e.window_count * 1e6 / static_cast<double>(window);
    e.window_start_us = now_us;
    e.window_count = 0;
  }
  e.window_count += 1;
  e.last_seen_us = now_us;
  return &e;
}

bool LeaseTable::try_spend(const LimitDescriptor& bucket, double cost, std::int64_t now_us) {
  Entry* e = touch(bucket, now_us);
  if (e == nullptr || e->tokens < cost || now_us >= e->expires_us) return false;
  e->tokens -= cost;
  return true;
}

bool LeaseTable::put_back(const LimitDescriptor& bucket, double cost) {
  auto it = entries_.find(BucketKey::of(bucket));
  if (it == entries_.end()) return false;
  it->second.tokens += cost;
  return true;
}

double LeaseTable::ask(const LimitDescriptor& bucket, double cost) {
  auto it = entries_.find(BucketKey::of(bucket));
  if (it == entries_.end() || it->second.asking) return 0;
  Entry& e = it->second;
  const double size = lease_size(e.rate, bucket.lease_tokens, cost);
  const double wanted = std::floor(size - e.tokens);
  if (wanted < cost) return 0;
  e.asking = true;
  return wanted;
}

double LeaseTable::top_up(const LimitDescriptor& bucket, double cost) {
  auto it = entries_.find(BucketKey::of(bucket));
  if (it == entries_.end()) return 0;
  const Entry& e = it->second;
  if (e.tokens * 4 >= lease_size(e.rate, bucket.lease_tokens, cost)) return 0;
  return ask(bucket, cost);
}

bool LeaseTable::asking(const LimitDescriptor& bucket) const {
  auto it = entries_.find(BucketKey::of(bucket));
  return it != entries_.end() && it->second.asking;
}

void LeaseTable::answered(const LimitDescriptor& bucket) {
  auto it = entries_.find(BucketKey::of(bucket));
  if (it != entries_.end()) it->second.asking = false;
}

bool LeaseTable::on_grant(const LimitDescriptor& bucket, double tokens, const LimitState& after,
                          std::int64_t now_us) {
  auto it = entries_.find(BucketKey::of(bucket));
  if (it == entries_.end()) return false;
  Entry& e = it->second;
  e.asking = false;
  // What is left of the last lease joins the new one: it was debited too.
  e.tokens += tokens;
  e.bucket = bucket;
  e.store_remaining = after.remaining;
  e.granted_us = now_us;
  e.expires_us = now_us + lease_lifetime_us(after.remaining, bucket.capacity);
  return true;
}

LimitState LeaseTable::state(const LimitDescriptor& bucket, double cost,
                             std::int64_t now_us) const {
  auto it = entries_.find(BucketKey::of(bucket));
  if (it == entries_.end()) return local_state(bucket, bucket.capacity, cost, true);
  const Entry& e = it->second;
  const double in_store = refilled_tokens(bucket, e.store_remaining, now_us - e.granted_us);
  return local_state(bucket, std::min(bucket.capacity, in_store + e.tokens), cost, true);
}

std::vector<BucketRefund> LeaseTable::take_expired(std::int64_t now_us) {
  std::vector<BucketRefund> refunds;
  for (auto& [key, e] : entries_) {
    if (e.tokens > 0 && now_us >= e.expires_us) {
      refunds.push_back(BucketRefund{e.bucket, e.tokens});
      e.tokens = 0;
    }
  }
  drop_idle(now_us);
  return refunds;
}

void LeaseTable::drop_idle(std::int64_t now_us) {
  std::erase_if(entries_, [now_us](const auto& entry) {
    return entry.second.tokens <= 0 && now_us - entry.second.last_seen_us >= kIdleUs;
  });
}

std::vector<BucketRefund> LeaseTable::take_all() {
  std::vector<BucketRefund> refunds;
  for (auto& [key, e] : entries_) {
    if (e.tokens > 0) refunds.push_back(BucketRefund{e.bucket, e.tokens});
  }
  entries_.clear();
  return refunds;
}

std::optional<std::int64_t> LeaseTable::next_expiry() const {
  std::optional<std::int64_t> next;
  for (const auto& [key, e] : entries_) {
    if (e.tokens > 0 && (!next || e.expires_us < *next)) next = e.expires_us;
  }
  return next;
}

double LeaseTable::held_tokens() const {
  double held = 0;
  for (const auto& [key, e] : entries_) held += e.tokens;
  return held;
}

}  // namespace sluice
