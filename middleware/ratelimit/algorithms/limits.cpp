#include "middleware/ratelimit/algorithms/limits.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace sluice {
namespace {

// One bucket before any debit: a token bucket's refilled tokens, or a
// window's counts; and whether it fits `cost` now, or else its wait.
struct Loaded {
  Refilled bucket;
  WindowCounts window;
  QuotaUsage quota;
  BucketState log;  // a sliding log slid to now
  bool sufficient = false;
  double need = 0;  // seconds until it fits, when it may be reserved
};

Loaded load(const BucketState& state, const LimitDescriptor& limit, double cost,
            std::int64_t now_us) {
  Loaded l;
  if (limit.algorithm == LimitAlgorithm::kQuota) {
    // Never reserved: its units come back when the period ends.
    l.quota = quota_usage(state, limit.periods, now_us);
    // No period sent holds now (the script refuses such a call): nothing fits.
    l.sufficient = !std::isnan(l.quota.end_us) && l.quota.used + cost <= limit.capacity;
    return l;
  }
  if (limit.algorithm == LimitAlgorithm::kConcurrency) {
    // One slot per request; never reserved.
    l.log = state;
    drop_ended_slots(l.log, now_us);
    l.sufficient = static_cast<double>(l.log.log.size()) + 1 <= limit.capacity;
    return l;
  }
  if (limit.algorithm == LimitAlgorithm::kSlidingLog) {
    // Never reserved: its units come back as its entries leave the window.
    l.log = state;
    slide_log(l.log, limit.window_seconds, now_us);
    l.sufficient = static_cast<double>(l.log.log.size()) + log_units(cost) <= limit.capacity;
    return l;
  }
  if (limit.algorithm == LimitAlgorithm::kSlidingWindow) {
    l.window = window_counts(state, limit.window_seconds, now_us);
    l.need = window_seconds_to_cost(l.window, limit.capacity, cost);
    l.sufficient = l.need == 0;
    // A reservation is counted in this window, so it must go within it: only
    // while the previous window's count slides out (the current count leaves
    // room for it).
    if (l.need > 0 && l.window.current + cost > limit.capacity) {
      l.need = std::numeric_limits<double>::infinity();
    }
    return l;
  }
  l.bucket = refill_bucket(state, limit.capacity, limit.refill_per_second, now_us);
  const double tokens = l.bucket.tokens;
  if (tokens < cost && limit.max_wait_seconds > 0 && cost <= limit.capacity) {
    l.need = (cost - tokens) / limit.refill_per_second;
  }
  l.sufficient = l.need == 0 && tokens >= cost;
  return l;
}

// Debits a token bucket (with its lease when it fit) if `debit`, and reports it.
LimitState settle_bucket(const Loaded& l, const LimitDescriptor& limit, double cost, bool debit,
                         BucketState& state) {
  LimitState out;
  double tokens = l.bucket.tokens;
  if (debit) {
    double grant = 0;
    if (limit.lease_want > 0 && l.sufficient) {
      grant = std::floor((tokens - cost) / 2);
      if (grant > limit.lease_want) grant = limit.lease_want;
    }
    tokens = tokens - cost - grant;
    out.leased = grant;
    state = BucketState{tokens, l.bucket.timestamp_us, true};
  }
  const double capacity = limit.capacity;
  const double rate = limit.refill_per_second;
  out.remaining = tokens;
  out.seconds_to_cost = token_seconds_to_cost(tokens, capacity, rate, cost);
  out.seconds_to_full = tokens < capacity ? (capacity - tokens) / rate : 0;
  return out;
}

// Counts `cost` in a window's current count if `debit`, and reports it.
LimitState settle_window(const Loaded& l, const LimitDescriptor& limit, double cost, bool debit,
                         BucketState& state) {
  WindowCounts counts = l.window;
  if (debit) {
    counts.current = counts.current + cost;
    state =
        BucketState{counts.current, static_cast<std::int64_t>(counts.index), true, counts.previous};
  }
  LimitState out;
  out.seconds_to_cost = window_seconds_to_cost(counts, limit.capacity, cost);
  out.seconds_to_full = window_seconds_to_full(counts);
  out.remaining = limit.capacity - window_estimate(counts);
  return out;
}

// Counts `cost` in a quota's period if `debit`, and reports it.
LimitState settle_quota(const Loaded& l, const LimitDescriptor& limit, double cost, bool debit,
                        std::int64_t now_us, BucketState& state) {
  QuotaUsage usage = l.quota;
  if (std::isnan(usage.end_us)) {
    // Periods that do not hold now: nothing is counted; ask again in a second.
    LimitState out;
    out.remaining = limit.capacity - usage.used;
    out.seconds_to_cost = 1;
    out.seconds_to_full = 1;
    return out;
  }
  if (debit) {
    usage.used = usage.used + cost;
    state = BucketState{usage.used, static_cast<std::int64_t>(usage.end_us), true};
  }
  const double left = (usage.end_us - static_cast<double>(now_us)) / 1000000;
  LimitState out;
  out.remaining = limit.capacity - usage.used;
  if (cost > limit.capacity) {
    out.seconds_to_cost = std::numeric_limits<double>::infinity();
  } else if (usage.used + cost > limit.capacity) {
    out.seconds_to_cost = left;
  }
  out.seconds_to_full = left;
  return out;
}

// Logs ceil(cost) entries at `now_us` if `debit`, and reports it.
LimitState settle_log(const Loaded& l, const LimitDescriptor& limit, double cost, bool debit,
                      std::int64_t now_us, BucketState& state) {
  BucketState log = l.log;
  const double units = log_units(cost);
  if (debit) {
    const double now = static_cast<double>(now_us);
    // After every entry of the same time or earlier (a clock gone back
    // leaves later ones in the log).
    log.log.insert(std::upper_bound(log.log.begin(), log.log.end(), now),
                   static_cast<std::size_t>(units), now);
    log.exists = true;
    state = log;
  }
  LimitState out;
  out.remaining = limit.capacity - static_cast<double>(log.log.size());
  out.seconds_to_cost =
      log_seconds_to_cost(log, limit.capacity, limit.window_seconds, units, now_us);
  out.seconds_to_full = log_seconds_to_full(log, limit.window_seconds, now_us);
  return out;
}

// Takes a slot until now + lease if `debit`, and reports it: remaining =
// free slots; a second to wait when none would be left for the next request.
LimitState settle_slots(const Loaded& l, const LimitDescriptor& limit, bool debit,
                        std::int64_t now_us, BucketState& state) {
  BucketState slots = l.log;
  if (debit) {
    const double end = static_cast<double>(now_us) + limit.lease_ms * 1000;
    slots.log.insert(std::upper_bound(slots.log.begin(), slots.log.end(), end), end);
    slots.exists = true;
    state = slots;
  }
  const double count = static_cast<double>(slots.log.size());
  LimitState out;
  out.remaining = limit.capacity - count;
  out.seconds_to_cost = count + 1 > limit.capacity ? 1 : 0;
  return out;
}

}  // namespace

RateDecision decide_limits(std::span<BucketState> states, std::span<const LimitDescriptor> limits,
                           double cost, std::int64_t now_us) {
  const std::size_t n = std::min(states.size(), limits.size());
  RateDecision decision;
  decision.allowed = true;
  decision.limits.resize(n);

  // Load every bucket. The request passes only if each enforced bucket fits
  // `cost` or can be reserved within its max wait.
  std::vector<Loaded> loaded(n);
  std::vector<double> waits(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    loaded[i] = load(states[i], limits[i], cost, now_us);
    if (loaded[i].sufficient || limits[i].shadow) continue;
    const double need = loaded[i].need;
    if (need > 0 && need <= limits[i].max_wait_seconds) {
      waits[i] = need;
    } else {
      decision.allowed = false;
    }
  }

  // Debit all or none (a shadow bucket only when it fit), and report each
  // bucket as the script does.
  for (std::size_t i = 0; i < n; ++i) {
    const bool debit = decision.allowed && (!limits[i].shadow || loaded[i].sufficient);
    LimitState& out = decision.limits[i];
    switch (limits[i].algorithm) {
      case LimitAlgorithm::kTokenBucket:
        out = settle_bucket(loaded[i], limits[i], cost, debit, states[i]);
        break;
      case LimitAlgorithm::kSlidingWindow:
        out = settle_window(loaded[i], limits[i], cost, debit, states[i]);
        break;
      case LimitAlgorithm::kQuota:
        out = settle_quota(loaded[i], limits[i], cost, debit, now_us, states[i]);
        break;
      case LimitAlgorithm::kSlidingLog:
        out = settle_log(loaded[i], limits[i], cost, debit, now_us, states[i]);
        break;
      case LimitAlgorithm::kConcurrency:
        out = settle_slots(loaded[i], limits[i], debit, now_us, states[i]);
        break;
    }
    out.sufficient = loaded[i].sufficient;
    if (decision.allowed) {
      out.wait_seconds = waits[i];
      decision.delay_seconds = std::max(decision.delay_seconds, waits[i]);
    }
  }
  return decision;
}

}  // namespace sluice
