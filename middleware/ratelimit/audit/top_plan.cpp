#include "middleware/ratelimit/audit/top_plan.hpp"

#include <algorithm>
#include <atomic>

namespace sluice {
namespace {

// ZREMRANGEBYRANK's stop that keeps a set's kTopKept highest members.
std::string keep_highest_stop() {
  return std::to_string(-static_cast<long long>(kTopKept) - 1);
}

}  // namespace

std::string top_slot_key(std::string_view key_prefix, std::string_view limit, std::int64_t slot) {
  std::string key(key_prefix);
  key += "{top}:";
  key += std::to_string(slot);
  key += ':';
  key += limit;
  return key;
}

std::vector<std::string> top_slot_keys(std::string_view key_prefix, std::string_view limit,
                                       std::int64_t now_s, std::int64_t window_s) {
  std::vector<std::string> keys;
  const std::int64_t last = now_s / kTopSlotSeconds;
  const std::int64_t first = (now_s - window_s + 1) / kTopSlotSeconds;
  for (std::int64_t slot = first; slot <= last; ++slot) {
    keys.push_back(top_slot_key(key_prefix, limit, slot));
  }
  return keys;
}

std::uint64_t next_top_read() {
  static std::atomic<std::uint64_t> reads{0};
  return reads.fetch_add(1, std::memory_order_relaxed) + 1;
}

std::string top_scratch_key(std::string_view key_prefix, std::string_view instance,
                            std::uint64_t n) {
  std::string key(key_prefix);
  key += "{top}:scratch:";
  key += instance;
  key += ':';
  key += std::to_string(n);
  return key;
}

TopFlush top_flush_commands(std::string key, std::vector<const DenialCounts::Entry*> entries) {
  TopFlush out;
  if (entries.size() > kTopKept) {
    auto more = [](const DenialCounts::Entry* a, const DenialCounts::Entry* b) {
      return a->count != b->count ? a->count > b->count : a->caller < b->caller;
    };
    std::nth_element(entries.begin(), entries.begin() + kTopKept, entries.end(), more);
    for (auto it = entries.begin() + kTopKept; it != entries.end(); ++it)
      out.dropped += (*it)->count;
    entries.resize(kTopKept);
  }
  out.commands.reserve(entries.size() + 2);
  for (const auto* e : entries) {
    out.commands.push_back({"ZINCRBY", key, std::to_string(e->count), e->caller});
    out.denials.push_back(e->count);
  }
  out.commands.push_back({"ZREMRANGEBYRANK", key, "0", keep_highest_stop()});
  out.denials.push_back(0);
  out.commands.push_back({"EXPIRE", std::move(key), std::to_string(kTopKeyTtlSeconds)});
  out.denials.push_back(0);
  return out;
}

std::vector<std::vector<std::string>> top_read_commands(const std::string& scratch,
                                                        const std::vector<std::string>& slots,
                                                        std::size_t n) {
  std::vector<std::vector<std::string>> commands;
  for (std::size_t at = 0; at < slots.size(); at += kTopMergeSlots) {
    const std::size_t end = std::min(slots.size(), at + kTopMergeSlots);
    std::vector<std::string> merge{"ZUNIONSTORE", scratch};
    const bool first = at == 0;
    merge.push_back(std::to_string(end - at + (first ? 0 : 1)));
    if (!first) merge.push_back(scratch);
    merge.insert(merge.end(), slots.begin() + static_cast<std::ptrdiff_t>(at),
                 slots.begin() + static_cast<std::ptrdiff_t>(end));
    commands.push_back(std::move(merge));
    commands.push_back({"ZREMRANGEBYRANK", scratch, "0", keep_highest_stop()});
    // ZUNIONSTORE drops the key's TTL: give it back at once, so a read cut
    // off after any merge leaves nothing that lives for ever.
    commands.push_back({"PEXPIRE", scratch, std::to_string(kTopScratchTtlMs)});
  }
  commands.push_back({"ZRANGE", scratch, "0", std::to_string(n - 1), "REV", "WITHSCORES"});
  commands.push_back({"DEL", scratch});
  return commands;
}

}  // namespace sluice
