#include "middleware/ratelimit/audit/denial_counts.hpp"

#include <algorithm>
#include <limits>

namespace sluice {
namespace {

std::string pair_key(std::string_view limit, std::string_view caller) {
  std::string key;
  key.reserve(limit.size() + 1 + caller.size());
  key += limit;
  key += '\n';
  key += caller;
  return key;
}

DenialCounts::Entry entry_of(const std::string& key, std::uint64_t count) {
  const auto cut = key.find('\n');
  return {key.substr(0, cut), key.substr(cut + 1), count};
}

}  // namespace

void DenialCounts::add(std::string_view limit, std::string_view caller) {
  std::string key = pair_key(limit, caller);
  if (auto it = held_.find(key); it != held_.end()) {
    ++it->second;
    return;
  }
  if (held_.size() >= capacity_) make_room();
  held_.emplace(std::move(key), 1);
}

void DenialCounts::make_room() {
  std::uint64_t smallest = std::numeric_limits<std::uint64_t>::max();
  for (const auto& [key, count] : held_) smallest = std::min(smallest, count);
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->second != smallest) {
      ++it;
      continue;
    }
    if (aside_.size() < capacity_) {
      aside_.push_back(entry_of(it->first, it->second));
    } else {
      dropped_ += it->second;
    }
    it = held_.erase(it);
  }
}

std::vector<DenialCounts::Entry> DenialCounts::take() {
  std::vector<Entry> out = std::move(aside_);
  aside_.clear();
  out.reserve(out.size() + held_.size());
  for (const auto& [key, count] : held_) out.push_back(entry_of(key, count));
  held_.clear();
  return out;
}

}  // namespace sluice
