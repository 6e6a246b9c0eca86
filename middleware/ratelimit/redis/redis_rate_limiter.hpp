// The RateLimiter backed by Redis: one EVALSHA of the token-bucket script per
// decision, on the worker's own Redis connection, behind a circuit breaker.
// It is handed its redis::Client, and a factory for the client that replaces
// it when a reload changes the Redis settings. Created, used and destroyed on
// one worker's executor; completions arrive there. redis_ready() and
// circuit_open() may be read from any thread. The same connection carries the
// fleet heartbeat (fleet_heartbeat.lua) that counts the live instances.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include <boost/asio/any_io_executor.hpp>

#include "gateway/config/config.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"
#include "middleware/ratelimit/redis/limiter_error.hpp"
#include "middleware/ratelimit/redis/redis_options.hpp"
#include "upstream/redis/client.hpp"

namespace sluice {

class MetricsShard;

// The bytes of fleet_heartbeat.lua.
extern const std::string_view kFleetHeartbeatScript;

// The number of live instances, or the error that kept Redis from answering
// (`detail`: what Redis said, when it answered with an error).
using FleetHandler = std::function<void(std::error_code, long long live, std::string_view detail)>;

class RedisRateLimiter final : public RateLimiter {
 public:
  RedisRateLimiter(boost::asio::any_io_executor executor, const RedisConfig& config,
                   MetricsShard& metrics, std::unique_ptr<redis::Client> client,
                   redis::ClientFactory make_client);
  ~RedisRateLimiter() override;

  void decide(const std::vector<LimitDescriptor>& descriptors, double cost,
              RateDecisionHandler handler) override;
  void refund(std::vector<BucketRefund> refunds, RefundHandler done) override;
  bool refunds_together() const override;
  void renew(std::vector<LimitDescriptor> slots, RefundHandler done) override;
  // One call each on the bucket's key (bucket_admin.hpp), not behind the breaker.
  void inspect(const LimitDescriptor& bucket, BucketViewHandler handler) override;
  void reset(const LimitDescriptor& bucket, RefundHandler done) override;

  // A reloaded config: changed Redis options (address, credentials, TLS,
  // timeouts) replace the connection with one from the factory, which takes
  // over once ready; breaker settings, the key prefix and the timeout apply
  // to the next decision.
  void reconfigure(const RedisConfig& config);

  // Renews this instance's heartbeat in the fleet's sorted set
  // (<key_prefix>fleet: one key, so one call on any topology) and learns how
  // many instances renewed theirs within `ttl`; `leave` removes the member
  // instead. Not behind the breaker, and not counted as a Redis error.
  void fleet_heartbeat(const std::string& instance_id, std::chrono::milliseconds ttl, bool leave,
                       FleetHandler handler);

  // Writes the gauges and Redis counters into the worker's metrics shard.
  void export_metrics();

  // Connects now and after every reconfigure (otherwise the first decision does).
  void connect();

  // The servers behind the connection and their state; on the limiter's executor.
  std::vector<redis::NodeStatus> nodes() const;
  // Why the connection is not ready (empty if it is); on the limiter's executor.
  std::string last_error_message() const;

  bool redis_ready() const;   // any thread
  bool circuit_open() const;  // any thread; the same truth as sluice_redis_circuit_open
  void close();

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice
