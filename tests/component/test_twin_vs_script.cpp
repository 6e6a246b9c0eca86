// Component test: each algorithm of the decision script on a real
// redis-server against its bit-exact C++ twin (decide_limits), one row of a
// table per algorithm, mixed with other limits, over many windows, periods or
// leases. One driver runs every row: it draws a call's limits and cost, asks
// the script, and compares. Where a row carries a roomy token bucket, the
// clock, an admitted call's stored timestamp there is the script's TIME, so
// the twin is decided at that very moment and checked bit for bit; a denial
// is checked against the twin at the TIME before and after the call. Each
// row adds what only its algorithm stores (a window's expiry, a quota's
// period, a log's entries, the slots' lease ends).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "support/script_limits.hpp"
#include "support/script_redis.hpp"
#include "support/twin_table.hpp"

using namespace sluice::test::script;  // NOLINT: the shared helpers of the script tests

namespace twin_vs_script_test {

// A call of some of `pool`'s three limits (one in six shadow), each with a
// request number of its own (a log's units, a concurrency slot), and the
// clock; its cost is drawn after.
Call numbered_call(const std::vector<LimitDescriptor>& pool, Lcg& rng) {
  Call call;
  call.limits = subset(pool, 1 + rng.next(7));
  for (auto& l : call.limits) {
    l.shadow = rng.next(6) == 0;
    l.slot = sluice::next_slot_number();
  }
  call.limits.push_back(kClock);
  return call;
}

// ---- token bucket: slow and fast refill, fractional capacity, leases,
// reservations; the order of limits varies. No clock: the first bucket an
// admitted call wrote tells its TIME.

TwinRow token_bucket_row() {
  const std::vector<LimitDescriptor> pool = {bucket("a", "a", 5, 0.001), bucket("b", "b", 3, 20),
                                             bucket("c", "c", 10, 0.5), bucket("d", "d", 2.5, 200)};
  // The bucket an admitted call wrote first: an enforced one, or a shadow one
  // that held `cost` (size() when none).
  const auto first_written = [](const Call& call) {
    for (std::size_t i = 0; i < call.limits.size(); ++i) {
      if (!call.limits[i].shadow || call.decided.limits[i].sufficient) return i;
    }
    return call.limits.size();
  };
  return TwinRow{
      .name = "token_bucket",
      .steps = 400,
      .draw =
          [pool](Redis& redis, Lcg& rng, int step, Twin& twin, Tally&) {
            if (step % 40 == 0) {  // start over with fresh buckets, so both outcomes keep coming
              for (const auto& l : pool) redis.command({"DEL", key_of(l)});
              twin.clear();
            }
            Call call;
            const std::uint32_t mask = 1 + rng.next(15);
            const std::uint32_t rotate = rng.next(4);
            for (std::uint32_t i = 0; i < 4; ++i) {
              const std::uint32_t k = (i + rotate) % 4;
              if (mask & (1u << k)) call.limits.push_back(pool[k]);
            }
            // Some buckets ask for a lease: none, fewer than half of what remains, or more.
            const double wants[] = {0, 0, 1, 2.5, 1000};
            for (auto& l : call.limits) l.lease_want = wants[rng.next(5)];
            // Some are shadow, some may wait (be reserved) for a while.
            const double max_waits[] = {0, 0, 0.05, 1, 100};
            for (auto& l : call.limits) {
              l.shadow = rng.next(4) == 0;
              l.max_wait_seconds = max_waits[rng.next(5)];
            }
            const double costs[] = {1, 0.5, 2, 0.25};
            call.cost = costs[rng.next(4)];
            return call;
          },
      .admitted_at = [first_written](Redis& redis,
                                     const Call& call) -> std::optional<std::int64_t> {
        const std::size_t written = first_written(call);
        if (written == call.limits.size()) return std::nullopt;
        return redis.stored(key_of(call.limits[written])).timestamp_us;
      },
      .unwritten =
          [](Redis& redis, const Call& call) {
            // Only short shadow buckets: admitted, nothing written.
            for (std::size_t i = 0; i < call.limits.size(); ++i) {
              CHECK_FALSE(call.decided.limits[i].sufficient);
              CHECK(redis.stored(key_of(call.limits[i])).exists == call.states[i].exists);
            }
          },
      .after_allowed =
          [](Redis& redis, const Call& call) {
            for (std::size_t i = 0; i < call.limits.size(); ++i) {
              const LimitDescriptor& l = call.limits[i];
              const BucketState stored = redis.stored(key_of(l));
              CHECK(stored.exists == call.states[i].exists);
              CHECK(stored.tokens == call.states[i].tokens);
              CHECK(stored.timestamp_us == call.states[i].timestamp_us);
              if (l.shadow && !call.decided.limits[i].sufficient) continue;  // not written
              // Every key written expires after about capacity / rate, or,
              // below zero (a reservation), when it would be full again.
              long long ttl = sluice::bucket_ttl_ms(l.capacity, l.refill_per_second);
              const double tokens = call.states[i].tokens;
              if (tokens < 0 && l.refill_per_second > 0) {
                ttl = static_cast<long long>(std::min(
                    std::ceil((l.capacity - tokens) / l.refill_per_second * 1000) + 1000,
                    static_cast<double>(sluice::kMaxBucketTtlMs)));
              }
              const long long pttl = redis.pttl(key_of(l));
              CHECK(pttl > 0);
              CHECK(pttl <= ttl);
              CHECK(pttl >= ttl - 2000);
            }
          },
      .after_denied =
          [](Redis& redis, const Call& call) {
            for (std::size_t i = 0; i < call.limits.size(); ++i) {
              // A denial writes nothing.
              const BucketState stored = redis.stored(key_of(call.limits[i]));
              CHECK(stored.exists == call.states[i].exists);
              if (stored.exists) {
                CHECK(stored.tokens == call.states[i].tokens);
                CHECK(stored.timestamp_us == call.states[i].timestamp_us);
              }
            }
          },
      .at_least = {.allowed = 50, .denied = 50},
  };
}

// ---- sliding window: short windows (a few hundred calls cross many of
// them), mixed with a token bucket.

bool is_window_limit(const LimitDescriptor& d) {
  return d.algorithm == sluice::LimitAlgorithm::kSlidingWindow;
}

BucketState stored_state(Redis& redis, const LimitDescriptor& d) {
  return is_window_limit(d) ? stored_window(redis, key_of(d)) : redis.stored(key_of(d));
}

// A window key the twin holds but Redis no longer has expired: the twin's
// copy must count for nothing by now.
void check_expired(const BucketState& twin, const LimitDescriptor& d, std::int64_t now) {
  const auto counts = sluice::window_counts(twin, d.window_seconds, now);
  CHECK(counts.current == 0);
  CHECK(counts.previous == 0);
}

TwinRow sliding_window_row() {
  const std::vector<LimitDescriptor> pool = {window("w1", 4, 0.05), window("w2", 2.5, 0.02),
                                             window("w3", 10, 0.2), bucket("t", "t", 3, 20)};
  return TwinRow{
      .name = "sliding_window",
      .draw =
          [pool](Redis&, Lcg& rng, int, Twin&, Tally&) {
            Call call;
            call.limits = subset(pool, 1 + rng.next(15));
            const double max_waits[] = {0, 0, 0.01, 1};
            for (auto& l : call.limits) {
              l.shadow = rng.next(5) == 0;
              l.max_wait_seconds = max_waits[rng.next(4)];
            }
            call.limits.push_back(kClock);
            const double costs[] = {1, 0.5, 2};
            call.cost = costs[rng.next(3)];
            return call;
          },
      .admitted_at = clock_time,
      .after_allowed =
          [](Redis& redis, const Call& call) {
            for (std::size_t i = 0; i < call.limits.size(); ++i) {
              const LimitDescriptor& l = call.limits[i];
              const BucketState stored = stored_state(redis, l);
              if (!stored.exists && is_window_limit(l)) {
                check_expired(call.states[i], l, redis.time_us());  // a slow step
                continue;
              }
              CHECK(stored.exists == call.states[i].exists);
              CHECK(stored.tokens == call.states[i].tokens);
              CHECK(stored.previous == call.states[i].previous);
              CHECK(stored.timestamp_us == call.states[i].timestamp_us);
              if (is_window_limit(l) && (!l.shadow || call.decided.limits[i].sufficient)) {
                check_window_ttl(redis, l, call.t0);  // two windows, then the key goes
              }
            }
          },
      .after_denied =
          [](Redis& redis, const Call& call) {
            for (std::size_t i = 0; i < call.limits.size(); ++i) {
              const BucketState stored = stored_state(redis, call.limits[i]);
              if (!stored.exists && is_window_limit(call.limits[i])) {
                check_expired(call.states[i], call.limits[i], call.t1);  // expired meanwhile
                continue;
              }
              CHECK(stored.tokens == call.states[i].tokens);  // a denial writes nothing
            }
          },
      // How often each outcome comes up depends on the machine's speed
      // against the short windows.
      .at_least = {.allowed = 40, .denied = 40, .reserved = 5},
  };
}

// ---- quota: periods of 40 and 100 ms, mixed with a token bucket, the
// gateway's periods starting a period behind Redis' clock (as they do in the
// second after a period starts) one call in five.

bool is_quota(const LimitDescriptor& d) {
  return d.algorithm == sluice::LimitAlgorithm::kQuota;
}

TwinRow quota_row() {
  std::vector<LimitDescriptor> pool = {quota("q1", 5), quota("q2", 2.5), bucket("t", "t", 3, 20)};
  pool.back().max_wait_seconds = 0.01;
  return TwinRow{
      .name = "quota",
      .draw =
          [pool](Redis& redis, Lcg& rng, int, Twin&, Tally& tally) {
            const double lengths[] = {40'000, 100'000};
            const int shifts[] = {0, 0, 0, -1, -1};
            Call call;
            const std::uint32_t mask = 1 + rng.next(7);
            const std::int64_t gateway_now = redis.time_us();
            for (std::uint32_t k = 0; k < 3; ++k) {
              if (!(mask & (1u << k))) continue;
              LimitDescriptor l = pool[k];
              if (is_quota(l)) {
                const int shift = shifts[rng.next(5)];
                tally.skewed += shift != 0;
                l.periods = periods_around(gateway_now, lengths[k], shift);
              }
              l.shadow = rng.next(6) == 0;
              call.limits.push_back(l);
            }
            call.limits.push_back(kClock);
            const double costs[] = {1, 0.5, 2};
            call.cost = costs[rng.next(3)];
            return call;
          },
      .admitted_at = clock_time,
      .refused =
          [](Redis&, const Call& call, Tally&) {
            // A slow step: Redis' time left the two periods sent before the call ran.
            CHECK_THAT(call.refused, Catch::Matchers::Contains("no quota period holds Redis time"));
            bool left = false;
            for (const auto& l : call.limits) {
              left = left || (is_quota(l) && static_cast<double>(call.t1) >= l.periods.next_end_us);
            }
            return left;
          },
      // Between the TIMEs before and after the call, unless a period ended
      // in between (then the twin's two ends are in different periods).
      .comparable =
          [](const Call& call) {
            bool one_period = true;
            for (const auto& l : call.limits) {
              if (is_quota(l)) {
                one_period = one_period && sluice::quota_period_end(l.periods, call.t0) ==
                                               sluice::quota_period_end(l.periods, call.t1);
              }
            }
            return one_period;
          },
      .denial_never_delays = true,
      .after_allowed =
          [](Redis& redis, const Call& call) {
            for (std::size_t i = 0; i < call.limits.size(); ++i) {
              const LimitDescriptor& l = call.limits[i];
              if (!is_quota(l)) continue;
              const BucketState stored = stored_quota(redis, key_of(l));
              if (!stored.exists) continue;  // its period ended a second ago (a slow step)
              CHECK(stored.tokens == call.states[i].tokens);
              CHECK(stored.timestamp_us == call.states[i].timestamp_us);
              if (!l.shadow || call.decided.limits[i].sufficient) {
                // Written now: it expires a second after its period ends.
                const long long pttl = redis.pttl(key_of(l));
                CHECK(pttl > 0);
                CHECK(pttl <=
                      sluice::quota_ttl_ms(static_cast<double>(stored.timestamp_us), call.t0));
              }
            }
          },
      .after_denied =
          [](Redis& redis, const Call& call) {
            for (std::size_t i = 0; i < call.limits.size(); ++i) {
              if (!is_quota(call.limits[i])) continue;
              const BucketState stored = stored_quota(redis, key_of(call.limits[i]));
              if (stored.exists) CHECK(stored.tokens == call.states[i].tokens);  // nothing written
            }
          },
      .at_least = {.allowed = 40, .denied = 40, .skewed = 100},
  };
}

// ---- sliding log: windows of 20 and 50 ms, mixed with a token bucket; each
// request names its own units. The twin's entries are Redis' log.

TwinRow sliding_log_row() {
  const std::vector<LimitDescriptor> pool = {log_limit("l1", 5, 0.05), log_limit("l2", 3.5, 0.02),
                                             bucket("t", "t", 3, 20)};
  return TwinRow{
      .name = "sliding_log",
      .draw =
          [pool](Redis&, Lcg& rng, int, Twin&, Tally&) {
            Call call = numbered_call(pool, rng);  // each request names its own units
            const double costs[] = {1, 0.5, 2, 3};
            call.cost = costs[rng.next(4)];
            return call;
          },
      .admitted_at = clock_time,
      .denial_never_delays = true,
      .after_each =
          [](Redis& redis, const Call& call, Twin& twin) {
            for (std::size_t i = 0; i < call.limits.size(); ++i) {
              const LimitDescriptor& l = call.limits[i];
              if (l.algorithm != sluice::LimitAlgorithm::kSlidingLog) continue;
              // Both slid to the TIME after the call (Redis slid the log at
              // its own TIME, even for a denial).
              const std::vector<double> in_redis = stored_log(redis, key_of(l));
              BucketState mine = twin[key_of(l)];
              sluice::slide_log(mine, l.window_seconds, call.t1);
              BucketState theirs;
              theirs.log = in_redis;
              sluice::slide_log(theirs, l.window_seconds, call.t1);
              CHECK(theirs.log == mine.log);
              if (call.decided.allowed && !in_redis.empty()) {
                const long long pttl = redis.pttl(key_of(l));
                CHECK(pttl > 0);
                CHECK(pttl <= sluice::log_ttl_ms(l.window_seconds));
              }
            }
          },
      .at_least = {.allowed = 40, .denied = 40},
  };
}

// ---- concurrency: leases of 30 and 80 ms, so that slots come back within
// the run, mixed with a token bucket. The lease ends in Redis are the twin's.

TwinRow concurrency_row() {
  const std::vector<LimitDescriptor> pool = {slots("c1", 3, 30), slots("c2", 5, 80),
                                             bucket("t", "t", 3, 20)};
  return TwinRow{
      .name = "concurrency",
      .draw =
          [pool](Redis&, Lcg& rng, int, Twin&, Tally&) {
            Call call = numbered_call(pool, rng);
            call.cost = 1 + rng.next(3);
            return call;
          },
      .admitted_at = clock_time,
      .after_each =
          [](Redis& redis, const Call& call, Twin& twin) {
            // Once both drop the ended ones.
            for (const LimitDescriptor& l : call.limits) {
              if (l.algorithm != sluice::LimitAlgorithm::kConcurrency) continue;
              BucketState theirs;
              for (const auto& [member, end] : stored_slots(redis, key_of(l))) {
                theirs.log.push_back(end);
              }
              std::sort(theirs.log.begin(), theirs.log.end());
              BucketState mine = twin[key_of(l)];
              sluice::drop_ended_slots(theirs, call.t1);
              sluice::drop_ended_slots(mine, call.t1);
              CHECK(theirs.log == mine.log);
            }
          },
      .at_least = {.allowed = 40, .denied = 40},
  };
}

TEST_CASE("script: each algorithm decides exactly like its C++ twin, mixed with other limits",
          "[ratelimit][script][redis][sliding_window][quota][sliding_log][concurrency]") {
  if (skip_without_redis()) return;
  const TwinRow rows[] = {token_bucket_row(), sliding_window_row(), quota_row(), sliding_log_row(),
                          concurrency_row()};
  for (const TwinRow& row : rows) {
    DYNAMIC_SECTION(row.name) {
      run_twin_row(row);
    }
  }
}

}  // namespace twin_vs_script_test
