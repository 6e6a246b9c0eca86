// The denial cache: buckets the store (Redis) recently reported short of
// tokens, so that a worker denies their next requests without asking again.
//
// Exact for the token bucket (and for the sliding window, whose estimate
// also only falls with time): a bucket gains tokens only by refilling, so one
// that needed `seconds_to_cost` more seconds to hold `cost` tokens when it was
// asked still lacks them, for that cost or any higher one, until those seconds
// have passed, whatever other instances do (they can only take tokens). An
// entry counts from the moment the request was sent, which is before the
// store read its clock, so it never outlives the store's own answer; and it
// lives at most kMaxEntryUs. Only a refund (a lease given back, a cross-slot
// request undone), a reload that changes a limit or an admin reset can give a
// bucket tokens sooner: whoever sees those clears the cache.
//
// A bucket with a max wait is never denied here (the store may reserve its
// tokens), nor a shadow bucket (its shortage never denies a request).
//
// One per worker, used on its executor only; bounded by `max_entries` (a full
// cache drops its expired entries, at most every 100 ms, and otherwise
// remembers nothing new). Its owner calls purge_expired() while it holds
// anything, so that a flood of distinct denied callers leaves nothing behind
// once their entries (at most kMaxEntryUs each) have run out.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>

#include "middleware/ratelimit/local/bucket_key.hpp"

namespace sluice {

class DenyCache {
 public:
  static constexpr std::int64_t kMaxEntryUs = 1'000'000;
  static constexpr std::int64_t kPurgeIntervalUs = 100'000;

  explicit DenyCache(std::size_t max_entries = 65536) : max_entries_(max_entries) {}

  // Records the store's denial of a request sent at `asked_us`: each bucket
  // short of `cost` is denied until it can have refilled (at most
  // kMaxEntryUs); the request's other buckets, which the denial did not
  // debit, are remembered as they were for as long, so that local denials
  // can report them.
  void remember(std::span<const LimitDescriptor> buckets, double cost, const RateDecision& decision,
                std::int64_t asked_us);

  // The bucket's state at `now_us` if a request of `cost` on it is known to
  // be denied; nullopt when the store must be asked.
  std::optional<LimitState> denied(const LimitDescriptor& bucket, double cost, std::int64_t now_us);
  // The bucket's last reported state, refilled to `now_us` (an upper bound:
  // others may have taken tokens since), for a request of `cost`.
  std::optional<LimitState> known(const LimitDescriptor& bucket, double cost, std::int64_t now_us);

  // The bucket got tokens back (a refund): ask the store next time.
  void forget(const LimitDescriptor& bucket) { entries_.erase(BucketKey::of(bucket)); }
  void clear() { entries_.clear(); }
  std::size_t size() const { return entries_.size(); }
  // Drops the entries that ran out by `now_us`; how many went.
  std::size_t purge_expired(std::int64_t now_us);
  // About what one entry holds of the heap (its node in the table).
  static constexpr std::size_t kEntryBytes = 192;

 private:
  struct Entry {
    bool denies = false;   // false: a bucket only known, from a denial of another
    double cost = 0;       // the cost that was denied
    double remaining = 0;  // tokens the store reported
    double capacity = 0;   // the parameters it was decided with
    double refill = 0;     // refill per second, or a sliding window's length
    double to_cost = 0;    // seconds_to_cost and seconds_to_full the store reported
    double to_full = 0;
    std::int64_t asked_us = 0;
    std::int64_t until_us = 0;  // denied until then
  };

  void put(const LimitDescriptor& bucket, const Entry& entry);
  // The live entry of a bucket decided with these parameters.
  const Entry* find(const LimitDescriptor& bucket, std::int64_t now_us);
  // The entry's bucket as of `now_us`.
  static LimitState state_at(const LimitDescriptor& bucket, const Entry& e, double cost,
                             std::int64_t now_us);

  std::size_t max_entries_;
  std::unordered_map<BucketKey, Entry, BucketKeyHash> entries_;
  std::int64_t last_purge_us_ = 0;
};

}  // namespace sluice
