// Leases: tokens a worker took from the store (Redis) ahead of its requests on
// a busy bucket, and spends locally without asking again.
//
// Exactness: a lease's tokens were debited in the store before any is spent,
// so leases never admit more than the limit. What they cost is the other
// way: tokens parked in one worker's lease are missing to everyone else until
// spent or given back, so leases stay small and short. A lease is asked for
// only on a bucket this worker sees at least kMinRate times a second, and no
// bigger than what the worker spends in kHorizonUs at its current rate (nor
// than the limit's lease_tokens); the store grants at most half of what the
// bucket holds after the request. A lease lives up to kMaxLifetimeUs, less
// when the store reported the bucket nearly empty; its unspent tokens are
// then refunded (take_expired), and all of them when the worker stops or the
// configuration changes (take_all).
//
// One per worker, used on its executor only; pure (the caller passes the
// time, in microseconds of a steady clock). Bounded by `max_entries` buckets.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "middleware/ratelimit/local/bucket_key.hpp"

namespace sluice {

// How many tokens to ask for on a bucket with lease_tokens `max_tokens`,
// seen `rate` times a second by this worker, for requests of `cost`: 0 when
// the bucket is too cold to be worth a lease.
double lease_size(double rate, double max_tokens, double cost);

// How long a lease lives, given what the store holds after granting it: the
// full kMaxLifetimeUs while the bucket is at least half full, less as it
// empties, never below kMinLifetimeUs.
std::int64_t lease_lifetime_us(double remaining_after, double capacity);

class LeaseTable {
 public:
  static constexpr double kMinRate = 5;                // requests per second
  static constexpr std::int64_t kHorizonUs = 200'000;  // a lease is what this time uses
  // The rate is measured over windows of kWindowUs, or of at least
  // kMinWindowUs once kEarlyCount requests came (a key that turns hot is
  // leasing within milliseconds, not after a whole window).
  static constexpr std::int64_t kWindowUs = 100'000;
  static constexpr std::int64_t kMinWindowUs = 5'000;
  static constexpr double kEarlyCount = 32;
  // 0.9 s, so that with the sweep's period a lease is back within 1 s.
  static constexpr std::int64_t kMaxLifetimeUs = 900'000;
  static constexpr std::int64_t kMinLifetimeUs = 100'000;
  static constexpr std::int64_t kIdleUs = 2'000'000;  // an unused, empty entry goes

  explicit LeaseTable(std::size_t max_entries = 65536) : max_entries_(max_entries) {}

  // A request of `cost` on a leased bucket: counted for the bucket's rate,
  // and served from its lease if the lease is live and holds `cost` (true:
  // the tokens are spent).
  bool try_spend(const LimitDescriptor& bucket, double cost, std::int64_t now_us);
  // Puts back what try_spend took (the request was not admitted after all).
  // False when the table no longer tracks the bucket: the caller refunds.
  bool put_back(const LimitDescriptor& bucket, double cost);

  // The lease to ask the store for along with a request of `cost`: the
  // bucket's lease size less what is still held, in whole tokens; 0 when the
  // bucket is too cold, when the rest still covers it, or when an ask is
  // already out (one per bucket at a time, so a burst of requests does not
  // lease the bucket many times over). A positive answer marks the ask as
  // out until on_grant() or answered().
  double ask(const LimitDescriptor& bucket, double cost);
  // After a request was served from the lease: the top-up to ask for now, as
  // ask() does, once what is left has fallen below a quarter of the lease
  // size, so that the next lease arrives before this one runs out.
  double top_up(const LimitDescriptor& bucket, double cost);
  // An ask came back without a lease (denied, failed, or nothing granted).
  void answered(const LimitDescriptor& bucket);
  // Whether an ask for the bucket's lease is out.
  bool asking(const LimitDescriptor& bucket) const;
  // The store admitted a request and granted `tokens` with it; `after` is the
  // bucket's state it reported (tokens left in the store). False when the
  // table no longer tracks the bucket (emptied meanwhile): the caller gives
  // the tokens back.
  bool on_grant(const LimitDescriptor& bucket, double tokens, const LimitState& after,
                std::int64_t now_us);

  // The state to report for a request of `cost` served from the lease: what
  // the store held at the grant, refilled since, plus the lease's tokens.
  LimitState state(const LimitDescriptor& bucket, double cost, std::int64_t now_us) const;

  // Leases past their lifetime leave; their unspent tokens are returned for a
  // refund. Idle empty entries are dropped too.
  std::vector<BucketRefund> take_expired(std::int64_t now_us);
  // The bucket leaves the table with its unspent tokens (not refunded: the
  // bucket was reset). An ask still out finds no entry (see on_grant).
  void forget(const LimitDescriptor& bucket) { entries_.erase(BucketKey::of(bucket)); }
  // Every unspent token, for a refund; the table is empty afterwards.
  std::vector<BucketRefund> take_all();

  // When the next lease expires (nullopt: no tokens are held).
  std::optional<std::int64_t> next_expiry() const;
  double held_tokens() const;
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    LimitDescriptor bucket;  // for the refund
    double tokens = 0;       // leased, unspent
    std::int64_t expires_us = 0;
    double store_remaining = 0;  // what the store held after the last grant
    std::int64_t granted_us = 0;
    // Rate: requests in the current window, and the rate of the last one.
    std::int64_t window_start_us = 0;
    double window_count = 0;
    double rate = 0;
    std::int64_t last_seen_us = 0;
    bool asking = false;  // an ask for this bucket's lease is out
  };

  Entry* touch(const LimitDescriptor& bucket, std::int64_t now_us);
  void drop_idle(std::int64_t now_us);

  std::size_t max_entries_;
  std::unordered_map<BucketKey, Entry, BucketKeyHash> entries_;
  std::int64_t last_full_sweep_us_ = 0;
};

}  // namespace sluice
