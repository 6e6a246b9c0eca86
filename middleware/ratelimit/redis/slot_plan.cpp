#include "middleware/ratelimit/redis/slot_plan.hpp"

#include <algorithm>
#include <limits>

#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "upstream/redis/cluster/slot.hpp"

namespace sluice {
namespace {

// Whether a part that admitted the request debited this bucket: every
// enforced bucket (sufficient or reserved), a shadow one only if sufficient.
bool debited(const LimitState& state, const LimitDescriptor& descriptor) {
  return !descriptor.shadow || state.sufficient;
}

// A bucket's state once `cost` and its lease are given back: as if the
// request had never been taken from it.
LimitState refunded(const LimitState& debited_state, const LimitDescriptor& descriptor,
                    double cost) {
  if (!debited(debited_state, descriptor)) return debited_state;
  LimitState state = debited_state;
  state.remaining =
      std::min(descriptor.capacity, debited_state.remaining + cost + debited_state.leased);
  state.leased = 0;
  state.wait_seconds = 0;
  // It had enough for this request, or (a reservation) lacked what it waited for.
  state.seconds_to_cost = debited_state.sufficient ? 0 : debited_state.wait_seconds;
  if (!algorithm_row(descriptor).refills) return state;
  const double missing = descriptor.capacity - state.remaining;
  state.seconds_to_full = missing <= 0 ? 0
                          : descriptor.refill_per_second > 0
                              ? missing / descriptor.refill_per_second
                              : std::numeric_limits<double>::infinity();
  return state;
}

}  // namespace

std::optional<std::uint16_t> common_slot(std::span<const std::string> keys) {
  if (keys.empty()) return std::nullopt;
  const std::uint16_t first = redis::cluster::key_slot(keys.front());
  for (std::size_t i = 1; i < keys.size(); ++i) {
    if (redis::cluster::key_slot(keys[i]) != first) return std::nullopt;
  }
  return first;
}

std::vector<SlotGroup> group_by_slot(std::span<const std::string> keys) {
  std::vector<SlotGroup> groups;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::uint16_t slot = redis::cluster::key_slot(keys[i]);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [slot](const SlotGroup& g) { return g.slot == slot; });
    if (it == groups.end()) {
      groups.push_back(SlotGroup{slot, {}});
      it = groups.end() - 1;
    }
    it->indexes.push_back(i);
  }
  return groups;
}

CombinedDecision combine_parts(std::span<const SlotGroup> groups,
                               std::span<const PartOutcome> parts,
                               std::span<const LimitDescriptor> descriptors, double cost) {
  CombinedDecision out;
  bool denied = false;
  std::error_code failure;
  for (const PartOutcome& part : parts) {
    if (part.error) {
      if (!failure) failure = part.error;
    } else if (!part.decision.allowed) {
      denied = true;
    }
  }
  const bool allowed = !denied && !failure;
  for (std::size_t g = 0; g < parts.size(); ++g) {
    if (!allowed && !parts[g].error && parts[g].decision.allowed) out.refunds.push_back(g);
  }
  if (!denied && failure) {
    out.error = failure;
    return out;
  }
  out.decision.allowed = allowed;
  out.decision.limits.resize(descriptors.size());
  for (const PartOutcome& part : parts) {
    if (allowed) {
      out.decision.delay_seconds =
          std::max(out.decision.delay_seconds, part.decision.delay_seconds);
    }
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const PartOutcome& part = parts[g];
    if (part.error) {
      // A failed part next to a denial: its buckets' states are unknown, and
      // they are reported as full, never as the limit that denied.
      for (const std::size_t i : groups[g].indexes) {
        out.decision.limits[i] = LimitState{true, descriptors[i].capacity, 0, 0};
      }
      continue;
    }
    const bool refund = !allowed && part.decision.allowed;
    const auto& indexes = groups[g].indexes;
    for (std::size_t k = 0; k < indexes.size() && k < part.decision.limits.size(); ++k) {
      const std::size_t i = indexes[k];
      out.decision.limits[i] = refund ? refunded(part.decision.limits[k], descriptors[i], cost)
                                      : part.decision.limits[k];
    }
  }
  return out;
}

std::vector<BucketRefund> part_refunds(const SlotGroup& group, const PartOutcome& part,
                                       std::span<const LimitDescriptor> descriptors, double cost) {
  std::vector<BucketRefund> out;
  const auto& indexes = group.indexes;
  for (std::size_t k = 0; k < indexes.size() && k < part.decision.limits.size(); ++k) {
    const LimitState& state = part.decision.limits[k];
    const LimitDescriptor& descriptor = descriptors[indexes[k]];
    if (debited(state, descriptor)) out.push_back(BucketRefund{descriptor, cost + state.leased});
  }
  return out;
}

}  // namespace sluice
