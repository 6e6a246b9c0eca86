// The concurrency slots one worker holds: given back when their exchange
// ends (those of one turn of the loop together: one refund call on one
// Redis, a call per slot on a Redis Cluster), renewed every third of the
// shortest lease held (a slot of a shorter lease than those held brings the
// next renewal forward), so that only a dead instance's slots expire, and
// counted in sluice_ratelimit_in_flight{limit}. A release
// that fails, or whose answer does not come in time, is sent again (it is
// idempotent) up to kReleaseAttempts times, and each slot's release is
// counted in sluice_ratelimit_slot_releases_total{result}. Used on the
// worker's executor.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/series_cache.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

class MetricsShard;

class SlotKeeper : public std::enable_shared_from_this<SlotKeeper> {
 public:
  using Executor = boost::asio::io_context::executor_type;

  SlotKeeper(const Executor& executor, std::shared_ptr<RateLimiter> limiter, MetricsShard& metrics);

  // Holds the slots a decision took (concurrency descriptors) until release().
  void hold(std::span<const LimitDescriptor> taken);
  // Forgets those of `taken` still held, and gives them back at the end of
  // this turn of the loop.
  void release(std::span<const LimitDescriptor> taken);

  std::size_t held() const { return held_.size(); }

  static constexpr int kReleaseAttempts = 3;
  static constexpr std::chrono::seconds kReleaseRetry{1};

 private:
  // Sends `releases` (its attempt-th time); `reached`: an earlier attempt may
  // have reached Redis.
  void give_back(std::vector<BucketRefund> releases, int attempt, bool reached);
  // Gives back this turn's releases.
  void flush();
  void count_releases(std::string_view result, double n);
  void arm();
  void renew_all();
  void count(const std::string& limit, double delta) { in_flight_.get(limit) += delta; }

  std::shared_ptr<RateLimiter> limiter_;
  // By slot number; its nodes come from (and go back to) the keeper's own
  // pool, so that holding a slot allocates nothing once warm.
  std::pmr::unsynchronized_pool_resource pool_;
  std::pmr::unordered_map<double, LimitDescriptor> held_{&pool_};
  std::vector<BucketRefund> releasing_;  // this turn's releases
  bool flush_posted_ = false;
  // This worker's slots held per limit: the gauge's own series, which only
  // this keeper moves.
  SeriesCache in_flight_;
  SeriesCache releases_;  // sluice_ratelimit_slot_releases_total by result
  using Clock = boost::asio::steady_timer::clock_type;
  boost::asio::steady_timer timer_;
  bool armed_ = false;
  std::uint64_t generation_ = 0;  // of the latest wait armed
};

}  // namespace sluice
