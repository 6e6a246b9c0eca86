#include "middleware/ratelimit/algorithms/concurrency.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <random>

namespace sluice {

double next_slot_number() {
  // Both halves start at random: two processes of one prefix collide only if
  // their counters also come within reach of each other.
  static std::random_device device;
  static const std::uint64_t prefix = (static_cast<std::uint64_t>(device()) & ((1u << 21) - 1))
                                      << 32;
  static std::atomic<std::uint32_t> counter{static_cast<std::uint32_t>(device())};
  return static_cast<double>(prefix | counter.fetch_add(1, std::memory_order_relaxed));
}

std::string slot_member(double slot) {
  std::string member;
  append_slot_member(member, slot);
  return member;
}

void append_slot_member(std::string& out, double slot) {
  char digits[20];
  const auto end = std::to_chars(digits, digits + sizeof digits, static_cast<std::uint64_t>(slot)).ptr;
  out.append(digits, end);
}

void drop_ended_slots(BucketState& state, std::int64_t now_us) {
  auto& ends = state.log;
  ends.erase(ends.begin(), std::upper_bound(ends.begin(), ends.end(), static_cast<double>(now_us)));
}

std::int64_t slots_ttl_ms(double lease_ms) {
  return static_cast<std::int64_t>(std::ceil(lease_ms)) + 1000;
}

}  // namespace sluice
