// The RateLimiter backed by Redis: one EVALSHA of the token-bucket script per
// decision, on the worker's own Redis connection, behind a circuit breaker.
// Created, used and destroyed on one worker's executor; completions arrive there.
#pragma once

#include <memory>
#include <system_error>

#include <boost/asio/any_io_executor.hpp>

#include "gateway/config/config.hpp"
#include "middleware/rate_limiter.hpp"

namespace sluice {

class MetricsShard;

// Errors of the limiter itself (Redis errors come from redis_category()).
enum class LimiterError { kCircuitOpen = 1, kBadReply };
std::error_code make_error_code(LimiterError e) noexcept;

class RedisRateLimiter final : public RateLimiter {
 public:
  RedisRateLimiter(boost::asio::any_io_executor executor, const RedisConfig& config,
                   MetricsShard& metrics);
  ~RedisRateLimiter() override;

  void decide(const std::vector<LimitDescriptor>& descriptors, double cost,
              RateDecisionHandler handler) override;

  // A reloaded config: a changed Redis address or credentials replace the
  // connection; breaker settings and the timeout apply to the next decision.
  void reconfigure(const RedisConfig& config);

  // Writes the gauges and Redis counters into the worker's metrics shard.
  void export_metrics();

  // Connects now and after every reconfigure (otherwise the first decision does).
  void connect();

  bool redis_ready() const;   // any thread
  bool circuit_open() const;  // any thread
  void close();

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice

namespace std {
template <>
struct is_error_code_enum<sluice::LimiterError> : true_type {};
}  // namespace std
