// The fleet heartbeat: how an instance learns N, the number of instances
// sharing the buckets, for the local fallback. One per process, run by one
// worker on that worker's executor (its timer and its Redis connection):
// every kFleetHeartbeatInterval it renews this instance's member of the fleet
// in Redis, which lives kFleetHeartbeatTtl, and hands the count of live
// members to the FallbackStore. While Redis does not answer, the store keeps
// the last count it was given; an instance that never got one uses N = 1.
// A failing heartbeat is reported each time (`failed`, for a counter) and
// logged once per run of failures, with what Redis said; only the first
// heartbeat of the process may fail unreported (its connection may still be
// coming up).
// On an orderly stop the instance leaves the fleet (best effort).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "middleware/ratelimit/local/fallback_store.hpp"

namespace sluice {

inline constexpr std::chrono::milliseconds kFleetHeartbeatInterval{1000};
inline constexpr std::chrono::milliseconds kFleetHeartbeatTtl{3000};

// 16 random bytes as 32 lower-case hex digits: a process's member in the fleet.
std::string random_instance_id();

class FleetHeartbeat final : public std::enable_shared_from_this<FleetHeartbeat> {
 public:
  // Sends one heartbeat (`leave`: the leave) and completes, on the same
  // executor, with the live count or an error (and what Redis said, if anything).
  using Done = std::function<void(std::error_code, long long live, std::string_view detail)>;
  using Send = std::function<void(bool leave, Done)>;

  FleetHeartbeat(boost::asio::any_io_executor executor, Send send,
                 std::shared_ptr<FallbackStore> store, std::function<void()> failed = {});

  // Starts beating (the first at once) or stops. Idempotent.
  void enable(bool on);

  // Stops beating and, if a heartbeat was ever sent, removes this instance's
  // member; `done` is called once after Redis answered or failed (or soon,
  // when there is nothing to remove), never inside the call.
  void leave(std::function<void()> done);

 private:
  void beat();
  void on_answer(std::error_code ec, long long live, std::string_view detail);

  boost::asio::any_io_executor executor_;
  Send send_;
  std::shared_ptr<FallbackStore> store_;
  std::function<void()> failed_;
  bool first_answer_ = true;  // no heartbeat has completed yet
  bool failing_ = false;      // the last heartbeat failed, and that run was logged
  boost::asio::steady_timer timer_;
  bool enabled_ = false;
  std::uint64_t generation_ = 0;  // bumped by enable(): the beat chain to keep
  bool joined_ = false;           // a heartbeat was sent: there may be a member to remove
};

}  // namespace sluice
