#include "middleware/ratelimit/decision_counters.hpp"

#include <cstdint>

namespace sluice {

void DecisionCounters::count(const void* where, std::size_t index, std::string_view route,
                             std::string_view limit, LimitVerdict verdict) {
  // Fibonacci hashing: the product's top bits pick the slot.
  const std::uint64_t key = reinterpret_cast<std::uintptr_t>(where) + index * 4 +
                            static_cast<std::uint64_t>(verdict);
  Slot& slot = slots_[(key * 0x9e3779b97f4a7c15ull) >> (64 - kSlotBits)];
  if (slot.value == nullptr || slot.verdict != verdict || slot.route != route ||
      slot.limit != limit) {
    slot.value = &metrics_.value_ref(
        "sluice_ratelimit_decisions_total",
        scratch_labels({{"route", route}, {"limit", limit}, {"decision", verdict_label(verdict)}}));
    slot.route.assign(route);
    slot.limit.assign(limit);
    slot.verdict = verdict;
  }
  *slot.value += 1;
}

}  // namespace sluice
