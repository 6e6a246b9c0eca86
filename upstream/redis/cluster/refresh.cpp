#include "upstream/redis/cluster/refresh.hpp"

#include <algorithm>
#include <utility>

#include "upstream/redis/client.hpp"
#include "upstream/redis/cluster/slot.hpp"

namespace sluice::redis::cluster {

void RefreshPacer::want(TimePoint at, const char* reason) {
  if (started_once_) at = std::max(at, last_start_ + gap_);
  if (at < due_) {
    due_ = at;
    reason_ = reason;
  }
}

const char* RefreshPacer::start(TimePoint now) {
  in_flight_ = true;
  started_once_ = true;
  last_start_ = now;
  due_ = TimePoint::max();
  return std::exchange(reason_, "");
}

std::vector<NodeAddress> refresh_candidates(const std::vector<NodeAddress>& seeds,
                                            const std::vector<NodeAddress>& primaries) {
  std::vector<NodeAddress> out;
  out.reserve(seeds.size() + primaries.size());
  for (const auto* list : {&seeds, &primaries}) {
    for (const NodeAddress& node : *list) {
      if (std::find(out.begin(), out.end(), node) == out.end()) out.push_back(node);
    }
  }
  return out;
}

std::string describe_change(const SlotMap& before, const SlotMap& after) {
  // Slots whose owner changed, counted per new owner in first-slot order.
  std::vector<std::pair<const NodeAddress*, std::size_t>> moved;
  std::size_t orphaned = 0;
  for (std::uint16_t slot = 0; slot < kSlotCount; ++slot) {
    const NodeAddress* was = before.owner(slot);
    const NodeAddress* now = after.owner(slot);
    if (was == now || (was && now && *was == *now)) continue;
    if (!now) {
      ++orphaned;
      continue;
    }
    auto it =
        std::find_if(moved.begin(), moved.end(), [&](const auto& m) { return *m.first == *now; });
    if (it == moved.end()) {
      moved.emplace_back(now, 1);
    } else {
      ++it->second;
    }
  }
  if (moved.empty() && orphaned == 0) return {};
  std::string out;
  const auto slots = [](std::size_t n) {
    return std::to_string(n) + (n == 1 ? " slot" : " slots");
  };
  for (const auto& [node, count] : moved) {
    if (!out.empty()) out += ", ";
    out += slots(count) + " moved to " + format_address(node->host, node->port);
  }
  if (orphaned != 0) {
    if (!out.empty()) out += ", ";
    out += slots(orphaned) + " without an owner";
  }
  const std::size_t primaries = after.primaries().size();
  out += "; " + std::to_string(primaries) + (primaries == 1 ? " primary" : " primaries");
  return out;
}

}  // namespace sluice::redis::cluster
