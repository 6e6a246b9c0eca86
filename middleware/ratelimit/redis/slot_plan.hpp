// A rate-limit decision on a Redis Cluster whose buckets live in more than one
// hash slot: which buckets go together in one script call (one per slot), and
// how the parts' answers combine. Sluice never admits a request that any part
// denied: when one part denies, or fails, the parts that debited are refunded.
// Pure: no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

// The buckets (indexes into the request's descriptors and keys) of one slot.
struct SlotGroup {
  std::uint16_t slot = 0;
  std::vector<std::size_t> indexes;
};

// The key slot every key shares, or nullopt when they are spread over several
// slots (no key: nullopt).
std::optional<std::uint16_t> common_slot(std::span<const std::string> keys);

// One group per slot, in the order each slot first appears among the keys.
std::vector<SlotGroup> group_by_slot(std::span<const std::string> keys);

// What one part (one slot's script call) answered.
struct PartOutcome {
  std::error_code error;  // set: the part could not decide; decision unused
  RateDecision decision;  // limits in the group's index order
};

struct CombinedDecision {
  std::error_code error;             // set when no part denied and some part failed
  RateDecision decision;             // limits in the request's descriptor order
  std::vector<std::size_t> refunds;  // the groups whose debit must be given back
};

// Combines the parts: denied when any part denied (the others' debits are
// refunded, and their states reported as they are once refunded); else a
// failure when any part failed (the debits made are refunded); else allowed,
// after the longest wait of its parts. Shadow buckets never make a part deny.
CombinedDecision combine_parts(std::span<const SlotGroup> groups,
                               std::span<const PartOutcome> parts,
                               std::span<const LimitDescriptor> descriptors, double cost);

// What a part that debited gives back for a request that is not admitted:
// `cost` and the lease it granted, per bucket of its group that it debited
// (every enforced bucket, reserved ones too; a shadow bucket only if it held `cost`).
std::vector<BucketRefund> part_refunds(const SlotGroup& group, const PartOutcome& part,
                                       std::span<const LimitDescriptor> descriptors, double cost);

}  // namespace sluice
