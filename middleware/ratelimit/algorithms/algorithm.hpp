// What sets one limit algorithm apart, as one row of one table keyed on the
// algorithm (its name and configuration fields are its row of
// kAlgorithmNames, gateway/config/algorithm.hpp): its kind in the decision script, the shape of its
// value in Redis, its key's expiry, the window its headers name, how the local layer, the
// cross-slot plan and the batcher treat it, and its view in the bucket API.
// Code that differs by algorithm asks its row instead of testing which one
// it is; adding an algorithm adds a row here and one in kAlgorithmNames, its
// section of the decision script and its twin.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "middleware/ratelimit/algorithms/token_bucket.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

struct LimitConfig;

struct AlgorithmRow {
  LimitAlgorithm algorithm;
  double script_kind;   // its kind in the decision script (shadow adds 1)
  double max_capacity;  // the largest capacity it takes (0: any)
  // One enforced key of it, alone in a request, may be decided in a batch.
  bool batches;
  // A request takes its cost from it (a concurrency limit takes one slot).
  bool counts_cost;
  // The denial cache may remember its denials (a concurrency slot may come
  // back at any moment: no).
  bool caches_denials;
  // Its tokens come back continuously (a refund makes it fuller at once, and
  // its time to full follows from the refill rate).
  bool refills;
  // Its three numbers x, y, z of the decision script (after kind and
  // capacity; x is also the refund script's).
  std::array<double, 3> (*script_numbers)(const LimitDescriptor& limit);
  // The number that, with capacity, tells one setting of it from another
  // (the denial cache forgets what it learnt under other ones): the refill
  // per second, the window in seconds, a quota's period end.
  double (*rate_or_window)(const LimitDescriptor& limit);
  // The expiry of its key in Redis, in milliseconds.
  std::int64_t (*key_ttl_ms)(const LimitDescriptor& limit);
  // The window its RateLimit-Policy names, in seconds (+infinity: never).
  double (*policy_window_seconds)(const LimitDescriptor& limit);
  // In the local fallback: whether a state held for `share` is as good as
  // absent at `now_us` (refilled, slid out, its period over).
  bool (*spent)(const BucketState& state, const LimitDescriptor& share, std::int64_t now_us);
  // Its value in Redis read back (exists = false for any other shape).
  BucketState (*stored_state)(std::string_view value);
  // Its own fields of the bucket API's document, after "algorithm": capacity
  // and its settings.
  void (*describe)(nlohmann::ordered_json& doc, const LimitConfig& config,
                   const LimitDescriptor& limit);
  // The fields of the bucket API's document that tell its state, read at
  // view.read_at_us.
  void (*state_fields)(nlohmann::ordered_json& doc, const LimitDescriptor& limit,
                       const BucketView& view);
  // A refund of it that Redis takes as one plain command on its key instead
  // of a refund script call (a slot given back: ZREM of its member); nullptr
  // when it needs the script.
  std::vector<std::string> (*refund_command)(std::string key, const BucketRefund& refund);
};

const AlgorithmRow& algorithm_row(LimitAlgorithm algorithm);
inline const AlgorithmRow& algorithm_row(const LimitDescriptor& limit) {
  return algorithm_row(limit.algorithm);
}
// The row of a configured limit's algorithm.
const AlgorithmRow& algorithm_row(const LimitConfig& limit);

}  // namespace sluice
