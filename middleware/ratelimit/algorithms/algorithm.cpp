#include "middleware/ratelimit/algorithms/algorithm.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "gateway/config/config.hpp"
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

const AlgorithmRow kTokenBucket{
    LimitAlgorithm::kTokenBucket,
    "token_bucket",
    "a token bucket: its fields are capacity and refill_per_second",
    "refill_per_second",
    0,
    true,
    true,
    [](const LimitDescriptor& l) { return l.refill_per_second; },
    [](const LimitDescriptor& l) { return bucket_ttl_ms(l.capacity, l.refill_per_second); },
    [](const LimitDescriptor& l) {
      // The time in which the whole capacity refills.
      return l.refill_per_second > 0 ? l.capacity / l.refill_per_second
                                     : std::numeric_limits<double>::infinity();
    },
    [](const LimitDescriptor&) { return 0.0; },
    token_bucket_stored,
    [](nlohmann::ordered_json& doc, const LimitDescriptor& l) {
      doc["capacity"] = l.capacity;
      doc["refill_per_second"] = l.refill_per_second;
    },
};

// ---- sliding window: at most capacity per window_seconds
// Stored as three little-endian doubles: the window's index, its count, the
// previous window's count.

BucketState sliding_window_stored(std::string_view value) {
  double d[3];
  if (!unpack_doubles(value, d)) return {};
  return BucketState{d[1], static_cast<std::int64_t>(d[0]), true, d[2]};
}

const AlgorithmRow kSlidingWindow{
    LimitAlgorithm::kSlidingWindow,
    "sliding_window",
    "a sliding window: its fields are capacity and window_ms",
    "window_ms",
    2,
    true,
    false,
    [](const LimitDescriptor& l) { return l.window_seconds; },
    [](const LimitDescriptor& l) { return window_ttl_ms(l.window_seconds); },
    [](const LimitDescriptor& l) { return l.window_seconds; },
    [](const LimitDescriptor& l) { return l.window_seconds; },
    sliding_window_stored,
    [](nlohmann::ordered_json& doc, const LimitDescriptor& l) {
      doc["capacity"] = l.capacity;
      doc["window_ms"] = std::llround(l.window_seconds * 1000);
    },
};

}  // namespace

const AlgorithmRow& algorithm_row(LimitAlgorithm algorithm) {
  switch (algorithm) {
    case LimitAlgorithm::kSlidingWindow:
      return kSlidingWindow;
    case LimitAlgorithm::kTokenBucket:
      break;
  }
  return kTokenBucket;
}

const AlgorithmRow& algorithm_row(const LimitConfig& limit) {
  switch (limit.algorithm) {
    case LimitConfig::Algorithm::kSlidingWindow:
      return kSlidingWindow;
    case LimitConfig::Algorithm::kTokenBucket:
      break;
  }
  return kTokenBucket;
}

}  // namespace sluice
