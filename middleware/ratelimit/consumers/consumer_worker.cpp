#include "middleware/ratelimit/consumers/consumer_worker.hpp"

#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "upstream/redis/client_factory.hpp"

namespace sluice {

ConsumerWorker::ConsumerWorker(boost::asio::any_io_executor executor,
                               const std::shared_ptr<const Config>& config, MetricsShard& metrics,
                               std::shared_ptr<LookupCoalescer> coalescer)
    : executor_(executor),
      config_(config),
      metrics_(metrics),
      make_client_(redis::client_factory(executor)),
      resolver_(std::make_shared<ConsumerResolver>(executor, std::move(coalescer), metrics,
                                                   *config)) {
  resolver_->join_coalescer();
  on_config();
}

ConsumerWorker::~ConsumerWorker() { close(); }

void ConsumerWorker::on_config() {
  const Config& config = *config_;
  resolver_->configure(config);
  if (config.api_keys.store != ApiKeysConfig::Store::kRedis) return close();
  const redis::Options options = redis_options(config.redis);
  if (client_ && options == options_) {
    store_->set_key_prefix(config.redis.key_prefix);
    return;
  }
  // A new connection for new settings; lookups under way on the old one end
  // with kClosed, and are then treated as the store not answering.
  close();
  options_ = options;
  client_ = make_client_(options);
  store_ = std::make_unique<ConsumerStore>(*client_, config.redis.key_prefix);
  store_->load_scripts();
  client_->connect(nullptr);
  resolver_->set_store(store_.get());
}

void ConsumerWorker::close() {
  resolver_->set_store(nullptr);
  if (client_) client_->close();
  // The store and client stay until the worker goes: handlers of closed
  // commands are still posted to this executor.
  if (client_) {
    retired_.push_back(std::move(client_));
    retired_stores_.push_back(std::move(store_));
  }
}

}  // namespace sluice
