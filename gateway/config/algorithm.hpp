// The rate-limit algorithms by name: the one enum and the one table of their
// names and configuration fields, read by the config loader (which fields a
// limit of each takes) and by the rate-limit middleware, whose own row per
// algorithm (middleware/ratelimit/algorithms/algorithm.hpp) keys on the same
// enum. Adding an algorithm adds a row here and one there.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace sluice {

enum class LimitAlgorithm {
  kTokenBucket,    // capacity, refilled at refill_per_second
  kSlidingWindow,  // at most capacity per window_seconds (previous window weighted by overlap)
  kQuota,          // at most capacity per calendar period (periods)
  kSlidingLog,     // at most capacity in any span of window_seconds (an exact log)
  kConcurrency,    // at most capacity requests in progress (slot, lease_ms)
};

struct AlgorithmName {
  LimitAlgorithm algorithm;
  std::string_view name;  // as the configuration and the bucket API write it
  // The field a limit of it requires besides capacity, and the one it may
  // have besides (empty: none).
  std::string_view required;
  std::string_view optional;
  // Its field besides capacity that a plan or a consumer overrides (empty:
  // capacity only).
  std::string_view rate_field;
  std::string_view fields;  // what a limit of it holds, for messages
};

// One row per algorithm, in the order of the enum.
inline constexpr std::array<AlgorithmName, 5> kAlgorithmNames = {{
    {.algorithm = LimitAlgorithm::kTokenBucket,
     .name = "token_bucket",
     .required = "refill_per_second",
     .optional = "",
     .rate_field = "refill_per_second",
     .fields = "a token bucket: its fields are capacity and refill_per_second"},
    {.algorithm = LimitAlgorithm::kSlidingWindow,
     .name = "sliding_window",
     .required = "window_ms",
     .optional = "",
     .rate_field = "window_ms",
     .fields = "a sliding window: its fields are capacity and window_ms"},
    {.algorithm = LimitAlgorithm::kQuota,
     .name = "quota",
     .required = "period",
     .optional = "timezone",
     .rate_field = "",
     .fields = "a quota: its fields are capacity, period and timezone"},
    {.algorithm = LimitAlgorithm::kSlidingLog,
     .name = "sliding_log",
     .required = "window_ms",
     .optional = "",
     .rate_field = "window_ms",
     .fields = "a sliding log: its fields are capacity and window_ms"},
    {.algorithm = LimitAlgorithm::kConcurrency,
     .name = "concurrency",
     .required = "",
     .optional = "lease_ms",
     .rate_field = "",
     .fields = "a concurrency limit: its fields are capacity and lease_ms"},
}};

constexpr bool algorithm_names_in_order() {
  for (std::size_t i = 0; i < kAlgorithmNames.size(); ++i) {
    if (static_cast<std::size_t>(kAlgorithmNames[i].algorithm) != i) return false;
  }
  return true;
}
static_assert(algorithm_names_in_order(), "kAlgorithmNames lists the algorithms in enum order");

constexpr const AlgorithmName& algorithm_name(LimitAlgorithm algorithm) {
  return kAlgorithmNames[static_cast<std::size_t>(algorithm)];
}

// The algorithm a configuration names, if any.
constexpr std::optional<LimitAlgorithm> algorithm_named(std::string_view name) {
  for (const AlgorithmName& row : kAlgorithmNames) {
    if (row.name == name) return row.algorithm;
  }
  return std::nullopt;
}

}  // namespace sluice
