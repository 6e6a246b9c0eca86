// The token-bucket arithmetic of the rate-limit script, as a pure C++ twin
// (time is passed in). decide_token_buckets() computes exactly what
// token_bucket.lua computes inside Redis: same formulas, same
// order of floating-point operations, same replies. It serves the unit tests
// (with a manual clock) and LocalBucketStore, a local fallback.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

// The stored state of one bucket: what the script keeps in Redis as two
// little-endian doubles (tokens, timestamp_us). A bucket that does not exist
// starts full.
struct BucketState {
  double tokens = 0;
  std::int64_t timestamp_us = 0;  // time of the last debit (server clock)
  bool exists = false;
};

// Expiry of a bucket written at a debit, in milliseconds: the time to refill an
// empty bucket completely plus a margin, so idle buckets cost no memory. Capped
// at kMaxBucketTtlMs (also for a refill rate of 0).
// The gateway computes it and passes it to the script as SET's PX argument.
inline constexpr std::int64_t kBucketTtlMarginMs = 1000;
inline constexpr std::int64_t kMaxBucketTtlMs = 1'000'000'000'000;  // ~31 years
std::int64_t bucket_ttl_ms(double capacity, double refill_per_second);

// Decides every bucket of one request at `now_us`: each bucket is refilled
// from the time elapsed since its timestamp (capped at its capacity; no refill
// when the clock went backwards). If every bucket holds at least `cost`
// tokens, all are debited and `states` updated (tokens, timestamp = the later
// of now and the stored timestamp, exists = true); otherwise nothing changes.
// An admitted request also takes each bucket's lease: floor((tokens - cost) / 2)
// capped at its lease_want (LimitState::leased).
// `states` and `limits` have the same size and order (extra entries ignored).
// seconds_to_cost is +infinity when cost > capacity (it can never be met) or
// when the refill rate is 0 and tokens are short.
RateDecision decide_token_buckets(std::span<BucketState> states,
                                  std::span<const LimitDescriptor> limits, double cost,
                                  std::int64_t now_us);

// Microseconds since the Unix epoch from the system clock.
std::int64_t system_now_us();

// In-memory buckets keyed by bucket_name() of their descriptor, deciding with the
// twin arithmetic and an injected clock. For unit tests and as a local
// fallback. Not thread-safe: one store per worker. Entries expire like the
// Redis keys do (bucket_ttl_ms after their last debit).
class LocalBucketStore {
 public:
  using Clock = std::function<std::int64_t()>;  // microseconds

  explicit LocalBucketStore(Clock now_us = system_now_us);

  RateDecision decide(std::span<const LimitDescriptor> limits, double cost);

  // The stored state of a bucket (exists = false when absent or expired).
  BucketState state(const LimitDescriptor& bucket) const;
  std::size_t size() const { return entries_.size(); }
  // Drops expired entries; decide() also does this every kSweepInterval calls.
  void purge_expired();

 private:
  static constexpr std::uint64_t kSweepInterval = 4096;

  struct Entry {
    BucketState state;
    std::int64_t expires_at_us = 0;
  };

  Clock now_us_;
  std::unordered_map<std::string, Entry> entries_;
  std::uint64_t calls_ = 0;
};

}  // namespace sluice
