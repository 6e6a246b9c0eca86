// What the consumer store gives one worker: the resolver in front of its
// rate limiter (middleware/ratelimit/consumers/consumer_resolver.hpp), its
// own Redis connection to the store (made while api_keys.store is redis,
// replaced when a reload changes the Redis settings), and what the admin API
// uses of it. Created, used and destroyed on the worker's executor.
#pragma once

#include <memory>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "gateway/config/config.hpp"
#include "middleware/ratelimit/admin/worker_registry.hpp"
#include "middleware/ratelimit/consumers/consumer_resolver.hpp"
#include "middleware/ratelimit/consumers/consumer_store.hpp"
#include "upstream/redis/client.hpp"

namespace sluice {

class MetricsShard;

class ConsumerWorker {
 public:
  ConsumerWorker(boost::asio::any_io_executor executor, const std::shared_ptr<const Config>& config,
                 MetricsShard& metrics, std::shared_ptr<LookupCoalescer> coalescer);
  ~ConsumerWorker();

  // The configuration in force changed (the worker's own pointer already
  // holds the new one).
  void on_config();
  void close();

  const std::shared_ptr<ConsumerResolver>& resolver() const { return resolver_; }
  // The store, while api_keys.store is redis; else null.
  ConsumerStore* store() const { return store_.get(); }
  const Config& config() const { return *config_; }
  // The servers behind the store's connection (none while the store is off).
  std::vector<redis::NodeStatus> nodes() const {
    return client_ ? client_->nodes() : std::vector<redis::NodeStatus>{};
  }
  MetricsShard& metrics() const { return metrics_; }
  const boost::asio::any_io_executor& executor() const { return executor_; }

 private:
  boost::asio::any_io_executor executor_;
  const std::shared_ptr<const Config>& config_;
  MetricsShard& metrics_;
  redis::ClientFactory make_client_;
  std::shared_ptr<ConsumerResolver> resolver_;
  redis::Options options_;  // of client_, when there is one
  std::unique_ptr<redis::Client> client_;
  std::unique_ptr<ConsumerStore> store_;
  // Closed connections (a reload, the store turned off) stay until the
  // worker goes: the handlers of their last commands still run here.
  std::vector<std::unique_ptr<redis::Client>> retired_;
  std::vector<std::unique_ptr<ConsumerStore>> retired_stores_;
};

// The workers of the process, for the consumer API and the change events.
using ConsumerWorkers = WorkerRegistry<ConsumerWorker>;

}  // namespace sluice
