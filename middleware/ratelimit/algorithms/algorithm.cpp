#include "middleware/ratelimit/algorithms/algorithm.hpp"

#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/spares.hpp"
#include "gateway/config/config.hpp"
#include "middleware/ratelimit/algorithms/concurrency.hpp"
#include "middleware/ratelimit/algorithms/quota.hpp"
#include "middleware/ratelimit/algorithms/sliding_log.hpp"
#include "middleware/ratelimit/algorithms/sliding_window.hpp"

namespace sluice {
namespace {

// ---- token bucket: capacity, refilled at refill_per_second
// Stored as two little-endian doubles: tokens, timestamp in microseconds.

// The N little-endian doubles a stored value holds; false for another shape.
template <std::size_t N>
bool unpack_doubles(std::string_view value, double (&d)[N]) {
  if (value.size() != sizeof d) return false;
  std::memcpy(d, value.data(), sizeof d);
  return true;
}

BucketState token_bucket_stored(std::string_view value) {
  double d[2];
  if (!unpack_doubles(value, d)) return {};
  return BucketState{d[0], static_cast<std::int64_t>(d[1]), true};
}

// tokens (a bucket never stored is full) and full_in_ms (null: never).
void refilling_state_fields(nlohmann::ordered_json& doc, const LimitDescriptor& l,
                            const BucketView& view) {
  doc["tokens"] = view.exists ? view.tokens : l.capacity;
  const double full_in = view.exists ? view.seconds_to_full : 0;
  doc["full_in_ms"] = nullptr;
  if (std::isfinite(full_in)) doc["full_in_ms"] = static_cast<long long>(std::ceil(full_in * 1000));
}

constexpr AlgorithmRow kTokenBucket{
    .algorithm = LimitAlgorithm::kTokenBucket,
    .script_kind = 0,
    .max_capacity = 0,
    .batches = true,
    .counts_cost = true,
    .caches_denials = true,
    .refills = true,
    .script_numbers =
        [](const LimitDescriptor& l) {
          return std::array<double, 3>{l.refill_per_second, l.lease_want, l.max_wait_seconds};
        },
    .rate_or_window = [](const LimitDescriptor& l) { return l.refill_per_second; },
    .key_ttl_ms =
        [](const LimitDescriptor& l) { return bucket_ttl_ms(l.capacity, l.refill_per_second); },
    .policy_window_seconds =
        [](const LimitDescriptor& l) {
          // The time in which the whole capacity refills.
          return l.refill_per_second > 0 ? l.capacity / l.refill_per_second
                                         : std::numeric_limits<double>::infinity();
        },
    .spent =
        [](const BucketState& st, const LimitDescriptor& share, std::int64_t now) {
          // Refilled to its share since.
          const double elapsed_s =
              static_cast<double>(std::max<std::int64_t>(now - st.timestamp_us, 0)) / 1e6;
          return st.tokens + elapsed_s * share.refill_per_second >= share.capacity;
        },
    .stored_state = token_bucket_stored,
    .describe =
        [](nlohmann::ordered_json& doc, const LimitConfig&, const LimitDescriptor& l) {
          doc["capacity"] = l.capacity;
          doc["refill_per_second"] = l.refill_per_second;
        },
    .state_fields = refilling_state_fields,
    .refund_command = nullptr,
};

// ---- sliding window: at most capacity per window_seconds
// Stored as three little-endian doubles: the window's index, its count, the
// previous window's count.

BucketState sliding_window_stored(std::string_view value) {
  double d[3];
  if (!unpack_doubles(value, d)) return {};
  return BucketState{d[1], static_cast<std::int64_t>(d[0]), true, d[2]};
}

constexpr AlgorithmRow kSlidingWindow{
    .algorithm = LimitAlgorithm::kSlidingWindow,
    .script_kind = 2,
    .max_capacity = 0,
    .batches = true,
    .counts_cost = true,
    .caches_denials = true,
    .refills = false,
    .script_numbers =
        [](const LimitDescriptor& l) {
          return std::array<double, 3>{l.window_seconds, 0, l.max_wait_seconds};
        },
    .rate_or_window = [](const LimitDescriptor& l) { return l.window_seconds; },
    .key_ttl_ms = [](const LimitDescriptor& l) { return window_ttl_ms(l.window_seconds); },
    .policy_window_seconds = [](const LimitDescriptor& l) { return l.window_seconds; },
    .spent =
        [](const BucketState& st, const LimitDescriptor& share, std::int64_t now) {
          // Both counts slid out.
          const WindowCounts counts = window_counts(st, share.window_seconds, now);
          return counts.current == 0 && counts.previous == 0;
        },
    .stored_state = sliding_window_stored,
    .describe =
        [](nlohmann::ordered_json& doc, const LimitConfig&, const LimitDescriptor& l) {
          doc["capacity"] = l.capacity;
          doc["window_ms"] = std::llround(l.window_seconds * 1000);
        },
    .state_fields = refilling_state_fields,
    .refund_command = nullptr,
};

// ---- quota: at most capacity per calendar period
// Stored as two little-endian doubles: its period's end (microseconds since
// the epoch), the units used in it.

BucketState quota_stored(std::string_view value) {
  double d[2];
  if (!unpack_doubles(value, d)) return {};
  return BucketState{d[1], static_cast<std::int64_t>(d[0]), true};
}

// An instant as RFC 3339 in UTC, to the second: "2026-12-01T05:00:00Z".
std::string rfc3339_utc(std::int64_t seconds) {
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string(text, n);
}

constexpr AlgorithmRow kQuota{
    .algorithm = LimitAlgorithm::kQuota,
    .script_kind = 4,
    .max_capacity = 0,
    .batches = true,
    .counts_cost = true,
    .caches_denials = true,
    .refills = false,
    .script_numbers =
        [](const LimitDescriptor& l) {
          return std::array<double, 3>{l.periods.start_us, l.periods.end_us, l.periods.next_end_us};
        },
    .rate_or_window = [](const LimitDescriptor& l) { return l.periods.end_us; },
    .key_ttl_ms =
        [](const LimitDescriptor& l) {
          return static_cast<std::int64_t>(
                     std::ceil((l.periods.end_us - l.periods.start_us) / 1000)) +
                 1000;
        },
    .policy_window_seconds =
        [](const LimitDescriptor& l) { return (l.periods.end_us - l.periods.start_us) / 1e6; },
    .spent =
        [](const BucketState& st, const LimitDescriptor& share, std::int64_t now) {
          // Nothing used in the period holding now.
          return quota_usage(st, share.periods, now).used == 0;
        },
    .stored_state = quota_stored,
    .describe =
        [](nlohmann::ordered_json& doc, const LimitConfig& config, const LimitDescriptor& l) {
          doc["capacity"] = l.capacity;
          doc["period"] = calendar_period_name(config.period);
          doc["timezone"] = config.timezone.name;
        },
    .state_fields =
        [](nlohmann::ordered_json& doc, const LimitDescriptor& l, const BucketView& view) {
          // The view is a decision of cost 0 at the store's time: remaining is
          // capacity - used, and its time to full the time to the period's end.
          doc["used"] = l.capacity - view.tokens;
          doc["remaining"] = view.tokens;
          doc["resets_at"] = rfc3339_utc(
              std::llround(static_cast<double>(view.read_at_us) / 1e6 + view.seconds_to_full));
        },
    .refund_command = nullptr,
};

// ---- sliding log: at most capacity units in any span of window_seconds
// Stored as a sorted set, one member per unit scored by its admission time and
// named after its request's number (the descriptor's slot), so that a refund
// removes that request's own units; read back by bucket_read.lua as 'L' and
// the scores as little-endian doubles.

BucketState sliding_log_stored(std::string_view value) {
  if (value.empty() || value[0] != 'L' || (value.size() - 1) % sizeof(double) != 0) return {};
  BucketState state;
  state.log.resize((value.size() - 1) / sizeof(double));
  std::memcpy(state.log.data(), value.data() + 1, value.size() - 1);
  state.exists = !state.log.empty();
  return state;
}

constexpr AlgorithmRow kSlidingLog{
    .algorithm = LimitAlgorithm::kSlidingLog,
    .script_kind = 6,
    .max_capacity = kMaxSlidingLogCapacity,
    .batches = true,
    .counts_cost = true,
    .caches_denials = true,
    .refills = false,
    .script_numbers =
        [](const LimitDescriptor& l) {
          return std::array<double, 3>{l.window_seconds, l.slot, 0};
        },
    .rate_or_window = [](const LimitDescriptor& l) { return l.window_seconds; },
    .key_ttl_ms = [](const LimitDescriptor& l) { return log_ttl_ms(l.window_seconds); },
    .policy_window_seconds = [](const LimitDescriptor& l) { return l.window_seconds; },
    .spent =
        [](const BucketState& st, const LimitDescriptor& share, std::int64_t now) {
          // Every entry has left the window.
          BucketState slid = st;
          slide_log(slid, share.window_seconds, now);
          return slid.log.empty();
        },
    .stored_state = sliding_log_stored,
    .describe =
        [](nlohmann::ordered_json& doc, const LimitConfig&, const LimitDescriptor& l) {
          doc["capacity"] = l.capacity;
          doc["window_ms"] = std::llround(l.window_seconds * 1000);
        },
    .state_fields = refilling_state_fields,
    .refund_command = nullptr,
};

// ---- concurrency: at most capacity requests in progress
// Stored as a sorted set, one member per slot scored by the end of its lease;
// read back like a sliding log ('L' and the scores).

constexpr AlgorithmRow kConcurrency{
    .algorithm = LimitAlgorithm::kConcurrency,
    .script_kind = 8,
    .max_capacity = 0,
    .batches = true,
    .counts_cost = false,
    .caches_denials = false,
    .refills = false,
    .script_numbers =
        [](const LimitDescriptor& l) {
          return std::array<double, 3>{l.slot, l.lease_ms, 0};
        },
    .rate_or_window = [](const LimitDescriptor& l) { return l.lease_ms; },
    .key_ttl_ms = [](const LimitDescriptor& l) { return slots_ttl_ms(l.lease_ms); },
    // RateLimit-Policy w: the second after which a denied client may try again.
    .policy_window_seconds = [](const LimitDescriptor&) { return 1.0; },
    .spent =
        [](const BucketState& st, const LimitDescriptor&, std::int64_t now) {
          // Every slot's lease has ended.
          BucketState slots = st;
          drop_ended_slots(slots, now);
          return slots.log.empty();
        },
    .stored_state = sliding_log_stored,
    .describe =
        [](nlohmann::ordered_json& doc, const LimitConfig& config, const LimitDescriptor& l) {
          doc["capacity"] = l.capacity;
          doc["lease_ms"] = config.lease.count();
        },
    .state_fields =
        [](nlohmann::ordered_json& doc, const LimitDescriptor& l, const BucketView& view) {
          // The view is a decision at the store's time: remaining = free slots.
          doc["in_flight"] = l.capacity - view.tokens;
          doc["free"] = view.tokens;
        },
    .refund_command =
        [](std::string key, const BucketRefund& refund) {
          // Built in spare lists and strings: the client gives them back once
          // the command is written.
          auto command = Spares<std::vector<std::string>>::take();
          command.emplace_back("ZREM");  // short: kept inside the string
          command.push_back(std::move(key));
          command.push_back(Spares<std::string>::take());
          append_slot_member(command.back(), refund.bucket.slot);
          return command;
        },
};

// The rows in the order of the enum (and of kAlgorithmNames).
constexpr std::array<const AlgorithmRow*, kAlgorithmNames.size()> kRows = {
    &kTokenBucket, &kSlidingWindow, &kQuota, &kSlidingLog, &kConcurrency};

constexpr bool rows_in_order() {
  for (std::size_t i = 0; i < kRows.size(); ++i) {
    if (kRows[i]->algorithm != kAlgorithmNames[i].algorithm) return false;
  }
  return true;
}
static_assert(rows_in_order(), "kRows lists one row per algorithm, in enum order");

}  // namespace

const AlgorithmRow& algorithm_row(LimitAlgorithm algorithm) {
  return *kRows[static_cast<std::size_t>(algorithm)];
}

const AlgorithmRow& algorithm_row(const LimitConfig& limit) {
  return algorithm_row(limit.algorithm);
}

}  // namespace sluice
