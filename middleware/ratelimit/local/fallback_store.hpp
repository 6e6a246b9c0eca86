// The local fallback: token buckets, sliding windows and quotas held in this process, deciding a
// request while Redis cannot (on_redis_failure: local). Each bucket enforces this
// instance's share of its limit, capacity / N and refill / N (a window keeps
// its length, a quota its period), N being the
// fleet size, with the same arithmetic as the Redis script (the twin
// decide_limits), so the N instances together admit at most what one
// Redis bucket would, plus each instance's starting share.
//
// One store per process, shared by the workers: every call is synchronous and
// takes a mutex (the path runs only while Redis cannot decide), except
// on_store_decided(), a lock-free check when the store is empty, so the
// middleware may call it after every Redis decision.
// Memory is bounded: at most max_buckets buckets, the least recently used
// evicted first. An evicted or never-seen bucket starts full at the share.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

#include "middleware/ratelimit/algorithms/limits.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"
#include "upstream/redis/redis_clock.hpp"

namespace sluice {

class FallbackStore {
 public:
  using Clock = std::function<std::int64_t()>;  // microseconds
  static constexpr std::size_t kDefaultMaxBuckets = 100000;

  // The default clock is the estimate of Redis' time (redis_clock.hpp): a
  // quota's periods are computed around it.
  explicit FallbackStore(std::size_t max_buckets = kDefaultMaxBuckets,
                         Clock now_us = redis::server_now_us);

  // Decides every bucket of one request at this instance's share (all or
  // none debited, as in Redis). The decision reports the share's numbers
  // (remaining, seconds_to_cost, ...), never grants a lease, and has
  // local = kFallback.
  RateDecision decide(std::span<const LimitDescriptor> limits, double cost);

  // N, the instances sharing each limit: the configured size when it is
  // above 0, else the number of live instances last learned from Redis, else
  // 1 (never learned: this instance enforces the whole limit).
  unsigned fleet_size() const;
  void set_configured_fleet_size(unsigned n);  // 0 = learn it
  void set_learned_fleet_size(unsigned n);     // the heartbeat's count; 0 is ignored
  // The largest learned count believed (local.max_fleet_size); above it, this.
  void set_max_learned_fleet_size(unsigned n);

  // Lowers or raises the bound; the least recently used buckets over it go now.
  void set_max_buckets(std::size_t max_buckets);

  // Gives back the concurrency slots of an exchange this store admitted
  // (it ended): one slot of each of those limits' local state is freed at
  // once, instead of when its lease would end.
  void release_slots(std::span<const LimitDescriptor> slots);

  // Forgets every bucket.
  void clear();
  // Redis decided `buckets` again: they are forgotten here, and, once no
  // request has needed the store for kQuietUs, so is every bucket that has
  // refilled to its share since (as good as absent); a bucket still short of
  // tokens stays, in case its part of Redis is still down. Without a lock
  // when nothing is held.
  void on_store_decided(std::span<const LimitDescriptor> buckets) {
    if (used_.load(std::memory_order_acquire)) forget(buckets);
  }
  static constexpr std::int64_t kQuietUs = 1'000'000;

  std::size_t size() const;
  // A bucket's stored state at the share (exists = false when not held).
  BucketState state(const LimitDescriptor& bucket) const;

 private:
  struct Entry {
    std::string name;
    BucketState state;
    LimitDescriptor share{};  // the share it was decided at
  };
  using Lru = std::list<Entry>;  // most recently used first

  void evict_over_bound();
  static bool refilled_to_share(const Entry& e, std::int64_t now);
  void forget(std::span<const LimitDescriptor> buckets);

  Clock now_us_;
  mutable std::mutex mutex_;
  std::size_t max_buckets_;
  Lru lru_;
  std::unordered_map<std::string, Lru::iterator> index_;
  std::atomic<bool> used_{false};
  std::int64_t last_decided_us_ = 0;  // the last decision made here
  std::atomic<unsigned> configured_fleet_size_{0};
  std::atomic<unsigned> learned_fleet_size_{0};
  std::atomic<unsigned> max_learned_fleet_size_{1000};
};

}  // namespace sluice
