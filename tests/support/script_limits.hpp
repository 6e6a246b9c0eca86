// The limits of each algorithm as the script tests build them, and their
// values read back from Redis: what the twin-vs-script table and each
// algorithm's own script tests share. Test code only; synchronous.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "middleware/ratelimit/algorithms/concurrency.hpp"
#include "middleware/ratelimit/algorithms/quota.hpp"
#include "middleware/ratelimit/algorithms/sliding_log.hpp"
#include "middleware/ratelimit/algorithms/sliding_window.hpp"
#include "support/script_redis.hpp"

namespace sluice::test::script {

// ---- sliding window

inline LimitDescriptor window(std::string limit, double capacity, double seconds) {
  LimitDescriptor d = bucket(std::move(limit), "w", capacity, 0);
  d.algorithm = sluice::LimitAlgorithm::kSlidingWindow;
  d.window_seconds = seconds;
  return d;
}

// A window key written by a call that began at the TIME t0 lives two
// windows from its writing: it has at most that left, and at least what the
// time since t0 leaves. On a busy machine it may already be gone, and only
// then.
inline void check_window_ttl(Redis& redis, const LimitDescriptor& d, std::int64_t t0) {
  const long long ttl = sluice::window_ttl_ms(d.window_seconds);
  const long long pttl = redis.pttl(key_of(d));
  const long long elapsed_ms = (redis.time_us() - t0) / 1000 + 1;
  INFO("PTTL " << pttl << " ms of " << ttl << ", " << elapsed_ms << " ms since the call");
  CHECK(pttl != -1);  // never without an expiry
  CHECK(pttl <= ttl);
  if (elapsed_ms + 1 < ttl) CHECK(pttl >= ttl - elapsed_ms - 1);
}

// ---- quota

inline LimitDescriptor quota(std::string limit, double capacity) {
  LimitDescriptor d = bucket(std::move(limit), "q", capacity, 0);
  d.algorithm = sluice::LimitAlgorithm::kQuota;
  return d;
}

// Periods of `len_us` aligned to multiples of it, around `t_us` shifted by
// `shift` periods (the gateway's clock ahead of or behind Redis').
inline sluice::QuotaPeriods periods_around(std::int64_t t_us, double len_us, int shift) {
  const double start = std::floor(static_cast<double>(t_us) / len_us) * len_us + shift * len_us;
  return sluice::QuotaPeriods{start, start + len_us, start + 2 * len_us};
}

// A stored quota: its period's end and the units used in it.
inline BucketState stored_quota(Redis& redis, const std::string& key) {
  Reply r = redis.command({"GET", key});
  if (r->type != REDIS_REPLY_STRING) return {};
  REQUIRE(r->len == 16);
  double d[2];
  std::memcpy(d, r->str, sizeof d);
  return BucketState{d[1], static_cast<std::int64_t>(d[0]), true};
}

// ---- sliding log

inline LimitDescriptor log_limit(std::string limit, double capacity, double seconds) {
  LimitDescriptor d = bucket(std::move(limit), "l", capacity, 0);
  d.algorithm = sluice::LimitAlgorithm::kSlidingLog;
  d.window_seconds = seconds;
  return d;
}

// The log in Redis: its entries' scores, oldest first.
inline std::vector<double> stored_log(Redis& redis, const std::string& key) {
  Reply r = redis.command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
  REQUIRE(r->type == REDIS_REPLY_ARRAY);
  std::vector<double> scores;
  for (std::size_t i = 1; i < r->elements; i += 2) scores.push_back(std::stod(r->element[i]->str));
  return scores;
}

// ---- concurrency

inline LimitDescriptor slots(std::string limit, double capacity, double lease_ms) {
  LimitDescriptor d = bucket(std::move(limit), "c", capacity, 0);
  d.algorithm = sluice::LimitAlgorithm::kConcurrency;
  d.lease_ms = lease_ms;
  return d;
}

// The slots in Redis: member -> the end of its lease (us).
inline std::map<std::string, double> stored_slots(Redis& redis, const std::string& key) {
  Reply r = redis.command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
  REQUIRE(r->type == REDIS_REPLY_ARRAY);
  std::map<std::string, double> out;
  for (std::size_t i = 0; i + 1 < r->elements; i += 2) {
    out[r->element[i]->str] = std::stod(r->element[i + 1]->str);
  }
  return out;
}

}  // namespace sluice::test::script
