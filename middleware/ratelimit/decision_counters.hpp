// The sluice_ratelimit_decisions_total series a worker counts on every limited
// request, found once per route, limit and verdict and then kept: counting a
// decision is a probe of a small table and two name comparisons, not a label
// set rendered, hashed and looked up.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/outcome.hpp"

namespace sluice {

class DecisionCounters {
 public:
  explicit DecisionCounters(MetricsShard& metrics) : metrics_(metrics) {}

  // Adds one to the series of (route, limit, verdict). `where` and `index`
  // only spread the keys over the table (the route's address and the limit's
  // place in it will do); the names decide what is counted, so a config
  // reloaded at the same address is no mistake.
  void count(const void* where, std::size_t index, std::string_view route, std::string_view limit,
             LimitVerdict verdict);

  static constexpr unsigned kSlotBits = 6;
  static constexpr std::size_t kSlots = std::size_t{1} << kSlotBits;

 private:
  struct Slot {
    std::string route;
    std::string limit;
    LimitVerdict verdict = LimitVerdict::kAllowed;
    double* value = nullptr;  // the shard's series (series are never removed)
  };

  MetricsShard& metrics_;
  std::array<Slot, kSlots> slots_;
};

}  // namespace sluice
