// The whole decision of the rate-limit script for one request, as a pure C++
// twin (time is passed in): token buckets (token_bucket.hpp), sliding
// windows (sliding_window.hpp) and quotas (quota.hpp) decided together, all or none debited, exactly
// as decide_limits.lua decides them inside Redis (a component test checks bit
// for bit). It serves the unit tests (with a manual clock) and the local
// fallback (local/fallback_store.hpp).
#pragma once

#include <cstdint>
#include <span>

#include "middleware/ratelimit/algorithms/concurrency.hpp"
#include "middleware/ratelimit/algorithms/quota.hpp"
#include "middleware/ratelimit/algorithms/sliding_log.hpp"
#include "middleware/ratelimit/algorithms/sliding_window.hpp"
#include "middleware/ratelimit/algorithms/token_bucket.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

// Decides every bucket of one request at `now_us`. A token bucket is refilled
// from the time elapsed since its timestamp (capped at its capacity; no refill
// when the clock went backwards) and fits when it holds `cost` tokens; a
// sliding window fits when its estimate + cost <= capacity; a quota when its
// period's used units + cost <= capacity (never reserved); a sliding log when
// the units it admitted within its window + ceil(cost) <= capacity (never
// reserved); a concurrency limit when one of its slots is free (never
// reserved).
// The request is admitted when every bucket that is not shadow fits or is
// reserved: its wait (seconds_to_cost before the debit) is positive and at
// most its max_wait_seconds (never when cost > capacity). Then every bucket
// that is not shadow is debited (a reserved token bucket goes below zero, a
// reserved window over its capacity), and each shadow bucket that fit;
// `states` are updated (exists = true). Otherwise nothing changes.
// A token bucket debited while it fit also gives its lease:
// floor((tokens - cost) / 2) capped at its lease_want (LimitState::leased).
// A reserved bucket reports its wait (LimitState::wait_seconds), and the
// decision the largest (delay_seconds).
// `states` and `limits` have the same size and order (extra entries ignored).
// seconds_to_cost is +infinity when cost > capacity (it can never be met) or
// when a token bucket's refill rate is 0 and tokens are short. A window's
// `remaining` is capacity - estimate (below 0 after a reservation).
RateDecision decide_limits(std::span<BucketState> states, std::span<const LimitDescriptor> limits,
                           double cost, std::int64_t now_us);

}  // namespace sluice
