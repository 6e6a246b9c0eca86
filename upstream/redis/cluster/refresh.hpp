// The rules of a cluster client's slot-map refresh, apart from its I/O: when
// the next refresh may start (at most one in flight, never closer than a
// minimum gap to the previous start, triggers coalesced with their first
// reason), which nodes to ask and in which order, and how a new map differs
// from the old one in one log line. Pure: time is passed in.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "upstream/redis/cluster/slot_map.hpp"

namespace sluice::redis::cluster {

class RefreshPacer {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  // The gap between two starts is min_gap, doubled (up to max_gap) after
  // each refresh that learned nothing new, and back to min_gap after one
  // that did: while a slot has no owner every failing request asks for a
  // refresh, and an unchanged answer must not be asked for ten times a second.
  explicit RefreshPacer(std::chrono::milliseconds min_gap, std::chrono::milliseconds max_gap)
      : min_gap_(min_gap), max_gap_(std::max(min_gap, max_gap)), gap_(min_gap) {}
  explicit RefreshPacer(std::chrono::milliseconds min_gap) : RefreshPacer(min_gap, min_gap) {}

  // A refresh is wanted for `reason` (a string literal), not before `at`.
  // The earliest wish wins; its start is held back to the current gap after
  // the previous start, and until the one in flight has finished.
  void want(TimePoint at, const char* reason);
  // When a refresh is due (TimePoint::max() when none is wanted); it may
  // start then unless one is still in flight.
  TimePoint due() const { return due_; }
  bool can_start(TimePoint now) const { return !in_flight_ && due_ <= now; }
  bool in_flight() const { return in_flight_; }
  // Starts the due refresh; returns its reason.
  const char* start(TimePoint now);
  // The refresh in flight ended; `learned` = it changed the map.
  void finish(bool learned = true) {
    in_flight_ = false;
    gap_ = learned ? min_gap_ : std::min(gap_ * 2, max_gap_);
  }
  std::chrono::milliseconds gap() const { return gap_; }

 private:
  std::chrono::milliseconds min_gap_;
  std::chrono::milliseconds max_gap_;
  std::chrono::milliseconds gap_;
  TimePoint due_ = TimePoint::max();
  TimePoint last_start_{};
  bool started_once_ = false;
  bool in_flight_ = false;
  const char* reason_ = "";
};

// The nodes to ask for the map, in order: the seeds, then the primaries of
// the current map, each address once.
std::vector<NodeAddress> refresh_candidates(const std::vector<NodeAddress>& seeds,
                                            const std::vector<NodeAddress>& primaries);
// The same, but those `connected` says already have a
// ready connection go first (no new connection for a routine refresh).
template <class Connected>
std::vector<NodeAddress> refresh_candidates(const std::vector<NodeAddress>& seeds,
                                            const std::vector<NodeAddress>& primaries,
                                            Connected&& connected) {
  std::vector<NodeAddress> out = refresh_candidates(seeds, primaries);
  std::stable_partition(out.begin(), out.end(), connected);
  return out;
}

// How `after` differs from `before`, e.g. "5461 slots moved to
// 127.0.0.1:7004; 3 primaries" or "12 slots without an owner; 3 primaries";
// empty when every slot has the same owner.
std::string describe_change(const SlotMap& before, const SlotMap& after);

}  // namespace sluice::redis::cluster
