#include "upstream/redis/redis_clock.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include <spdlog/spdlog.h>

namespace sluice::redis {
namespace {

// Redis' clock minus this host's steady clock, in microseconds: the largest
// of the recent readings (each a lower bound: TIME ran before its answer
// came back), so that a reading slowed by a busy Redis or a queue of
// commands ahead of it does not pull the estimate back.
std::atomic<std::int64_t> offset_us{0};
std::atomic<bool> measured{false};
std::atomic<bool> skew_logged{false};

// The readings of the last kKept probes (of any connection), a ring.
constexpr std::size_t kKept = 8;
std::mutex readings_mutex;
std::array<std::int64_t, kKept> readings{};
std::size_t readings_count = 0;
std::size_t next_reading = 0;

constexpr std::int64_t kLoggedSkewUs = 1'000'000;

}  // namespace

std::int64_t system_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t steady_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void note_server_time(std::int64_t server_us, std::int64_t received_steady_us) {
  std::int64_t best = 0;
  {
    std::lock_guard lock(readings_mutex);
    readings[next_reading] = server_us - received_steady_us;
    next_reading = (next_reading + 1) % kKept;
    readings_count = std::min(readings_count + 1, kKept);
    best = readings[0];
    for (std::size_t i = 0; i < readings_count; ++i) best = std::max(best, readings[i]);
  }
  offset_us.store(best, std::memory_order_relaxed);
  measured.store(true, std::memory_order_release);
  const double skew = clock_skew_seconds();
  if (std::abs(skew) * 1e6 > kLoggedSkewUs && !skew_logged.exchange(true)) {
    spdlog::warn(
        "this host's clock is {:.3f} s {} Redis' (TIME); quota periods and decision deadlines "
        "follow Redis' clock",
        std::abs(skew), skew > 0 ? "ahead of" : "behind");
  }
}

std::int64_t server_now_us() {
  if (!measured.load(std::memory_order_acquire)) return system_clock_us();
  return steady_clock_us() + offset_us.load(std::memory_order_relaxed);
}

double clock_skew_seconds() {
  if (!measured.load(std::memory_order_acquire)) return 0;
  return static_cast<double>(system_clock_us() - server_now_us()) / 1e6;
}

void reset_server_clock() {
  std::lock_guard lock(readings_mutex);
  readings_count = 0;
  next_reading = 0;
  offset_us.store(0, std::memory_order_relaxed);
  measured.store(false, std::memory_order_relaxed);
  skew_logged.store(false, std::memory_order_relaxed);
}

}  // namespace sluice::redis
