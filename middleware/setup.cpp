#include "middleware/setup.hpp"

#include <nlohmann/json.hpp>

#include "middleware/access_log.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/rate_limit_middleware.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "upstream/redis/single_node_client.hpp"

namespace sluice {
namespace {

// A configuration whose routes use no limit needs no Redis connection up front.
bool has_limits(const Config& config) {
  for (const auto& route : config.routes) {
    if (route_limits(route)) return true;
  }
  return false;
}

class MiddlewareServices final : public WorkerServices {
 public:
  explicit MiddlewareServices(const WorkerContext& worker)
      : metrics_(worker.metrics),
        limiter_(make_limiter(worker)) {
    if (has_limits(*worker.config)) limiter_->connect();
  }

  MiddlewareChain make_chain() override {
    MiddlewareChain chain;
    chain.steps.push_back(std::make_shared<RateLimitMiddleware>(limiter_, metrics_));
    chain.observers.push_back(std::make_shared<AccessLog>());
    return chain;
  }

  void before_scrape() override { limiter_->export_metrics(); }

  void on_config(const std::shared_ptr<const Config>& next) override {
    limiter_->reconfigure(next->redis);
    if (has_limits(*next)) limiter_->connect();
  }

  void on_stop() override { limiter_->close(); }

  DependencyState readiness() const override {
    return {limiter_->redis_ready(), limiter_->circuit_open()};
  }

 private:
  // The limiter is handed its client, and the factory of the client that
  // replaces it when a reload changes the Redis settings.
  static std::shared_ptr<RedisRateLimiter> make_limiter(const WorkerContext& worker) {
    const RedisConfig& redis = worker.config->redis;
    auto make_client = redis::single_node_factory(worker.executor);
    auto client = make_client(redis_options(redis));
    return std::make_shared<RedisRateLimiter>(worker.executor, redis, worker.metrics,
                                              std::move(client), std::move(make_client));
  }

  MetricsShard& metrics_;
  std::shared_ptr<RedisRateLimiter> limiter_;
};

class MiddlewareServicesFactory final : public WorkerServicesFactory {
 public:
  std::unique_ptr<WorkerServices> make(const WorkerContext& worker) override {
    return std::make_unique<MiddlewareServices>(worker);
  }

  void seed_metrics(const Config& config, MetricsShard& metrics) const override {
    seed_rate_limit_metrics(config, metrics);
  }

  // Redis is "ready" when every worker's connection is, "partial" when some are.
  nlohmann::json readiness(const std::vector<DependencyState>& workers) const override {
    if (workers.empty()) return nlohmann::json::object();
    std::size_t ready = 0;
    bool open = false;
    for (const auto& worker : workers) {
      ready += worker.ready ? 1 : 0;
      open = open || worker.circuit_open;
    }
    const std::size_t total = workers.size();
    return {
        {"redis", ready == total ? "ready" : (ready > 0 ? "partial" : "down")},
        {"redis_connections_ready", ready},
        {"redis_connections", total},
        {"redis_circuit_open", open},
    };
  }
};

}  // namespace

std::shared_ptr<WorkerServicesFactory> make_middleware_services() {
  return std::make_shared<MiddlewareServicesFactory>();
}

}  // namespace sluice
