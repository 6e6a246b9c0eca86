#include "upstream/redis/redis_clock.hpp"

#include <atomic>
#include <chrono>
#include <cmath>

#include <spdlog/spdlog.h>

namespace sluice::redis {
namespace {

// Redis' clock minus this host's, in microseconds.
std::atomic<std::int64_t> offset_us{0};
std::atomic<bool> skew_logged{false};

constexpr std::int64_t kLoggedSkewUs = 1'000'000;

}  // namespace

std::int64_t system_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void note_server_time(std::int64_t server_us, std::int64_t sent_us, std::int64_t received_us) {
  const std::int64_t midpoint = sent_us + (received_us - sent_us) / 2;
  const std::int64_t offset = server_us - midpoint;
  offset_us.store(offset, std::memory_order_relaxed);
  if (std::llabs(offset) > kLoggedSkewUs && !skew_logged.exchange(true)) {
    spdlog::warn(
        "this host's clock is {:.3f} s {} Redis' (TIME); quota periods and decision deadlines "
        "follow Redis' clock",
        std::abs(static_cast<double>(offset)) / 1e6, offset < 0 ? "ahead of" : "behind");
  }
}

std::int64_t server_now_us() {
  return system_clock_us() + offset_us.load(std::memory_order_relaxed);
}

double clock_skew_seconds() {
  return -static_cast<double>(offset_us.load(std::memory_order_relaxed)) / 1e6;
}

void reset_server_clock() {
  offset_us.store(0, std::memory_order_relaxed);
  skew_logged.store(false, std::memory_order_relaxed);
}

}  // namespace sluice::redis
