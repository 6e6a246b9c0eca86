// The Redis side of the most-limited view, as pure functions: key names, the
// commands one flush sends and the commands one read sends. No I/O; the one
// state is the process-wide counter that numbers reads.
//
// Layout: <key_prefix>{top}:<slot>:<limit>, a sorted set per limit and
// 10-second slot of the gateways' clocks (members: callers, scores: their
// denials in that slot). Every key of the view starts with the key prefix and
// shares the hash tag {top} after it, so that one Cluster node holds them all.
//
// Bounded at both ends, whatever number of distinct callers is denied:
// - a flush sends, per limit, only the kTopKept callers with the most denials
//   since the last flush (the others are dropped and counted), then trims the
//   slot's set back to its kTopKept highest scores (ZREMRANGEBYRANK), so a set
//   never holds more than 2 x kTopKept members for longer than a flush;
// - a read merges the window's slots kTopMergeSlots at a time into a scratch
//   set trimmed back to kTopKept after each merge, one plain command each, so
//   no command touches more than (kTopMergeSlots + 1) x kTopKept members.
// What that costs in exactness: a caller trimmed from a slot's set (or from a
// read's merge) loses the denials it had there, so counts are never too high,
// and exact as long as no slot of the window saw more than kTopKept distinct
// callers of the limit (nor a worker's flush).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "middleware/ratelimit/audit/denial_counts.hpp"

namespace sluice {

inline constexpr std::int64_t kTopSlotSeconds = 10;
inline constexpr std::int64_t kTopMaxWindowSeconds = 3600;
// Callers kept per slot set and per read's merge: the most a read may ask for.
inline constexpr std::size_t kTopKept = 1000;
// Slot sets merged by one command of a read.
inline constexpr std::size_t kTopMergeSlots = 4;
// A slot's set lives as long as the longest window can reach it, and a slot more.
inline constexpr std::int64_t kTopKeyTtlSeconds = kTopMaxWindowSeconds + 2 * kTopSlotSeconds;
// A read's scratch set outlives a read that stopped half-way by this long at most.
inline constexpr std::int64_t kTopScratchTtlMs = 60'000;

std::string top_slot_key(std::string_view key_prefix, std::string_view limit, std::int64_t slot);

// The slot keys a window of `window_s` seconds ending at `now_s` (Unix
// seconds) covers: every 10-second slot that overlaps it, oldest first.
std::vector<std::string> top_slot_keys(std::string_view key_prefix, std::string_view limit,
                                       std::int64_t now_s, std::int64_t window_s);

// The number of a read, unique in the process (every worker's reads share
// one counter, so two reads under way at once never share a scratch key).
std::uint64_t next_top_read();

// The scratch key of a read, named by the instance and next_top_read().
std::string top_scratch_key(std::string_view key_prefix, std::string_view instance,
                            std::uint64_t n);

// One flush's commands for the denials of one limit counted in `slot`:
// ZINCRBY for at most kTopKept of them (those with the most denials, ties
// broken by caller), a ZREMRANGEBYRANK that keeps the set's kTopKept highest,
// and an EXPIRE. `denials[i]` is what a failure of command i loses; `dropped`
// is what did not fit.
struct TopFlush {
  std::vector<std::vector<std::string>> commands;
  std::vector<std::uint64_t> denials;
  std::uint64_t dropped = 0;
};
TopFlush top_flush_commands(std::string key, std::vector<const DenialCounts::Entry*> entries);

// A read's commands: merge the slot keys into `scratch` kTopMergeSlots at a
// time (each merge trimmed back to kTopKept and given a short life again, since
// ZUNIONSTORE drops it), then
// ZRANGE its `n` highest (the last but one command's reply: caller, denials,
// ... most first) and delete it.
std::vector<std::vector<std::string>> top_read_commands(const std::string& scratch,
                                                        const std::vector<std::string>& slots,
                                                        std::size_t n);

}  // namespace sluice
