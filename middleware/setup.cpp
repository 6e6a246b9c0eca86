#include "middleware/setup.hpp"

#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/worker.hpp"
#include "middleware/access_log.hpp"
#include "middleware/rate_limit_middleware.hpp"
#include "middleware/redis_rate_limiter.hpp"

namespace sluice {
namespace {

// The limiters of all workers, for /readyz (read from the main thread).
bool has_limits(const Config& config) {
  for (const auto& route : config.routes) {
    if (!route.limit_indexes.empty()) return true;
  }
  return false;
}

struct LimiterRegistry {
  std::mutex mutex;
  std::vector<std::shared_ptr<RedisRateLimiter>> by_worker;
};

}  // namespace

ApplicationHooks make_middleware_hooks(const std::shared_ptr<const Config>&) {
  auto registry = std::make_shared<LimiterRegistry>();
  ApplicationHooks hooks;
  // Each worker gets its own limiter (its own Redis connection) and chain.
  hooks.make_chain = [registry](Worker& worker) {
    auto executor = worker.io().get_executor();
    auto limiter =
        std::make_shared<RedisRateLimiter>(executor, worker.config()->redis, worker.metrics());
    if (has_limits(*worker.config())) limiter->connect();
    {
      std::lock_guard lock(registry->mutex);
      if (registry->by_worker.size() <= worker.index()) {
        registry->by_worker.resize(worker.index() + 1);
      }
      registry->by_worker[worker.index()] = limiter;
    }
    MiddlewareChain chain;
    chain.steps.push_back(std::make_shared<RateLimitMiddleware>(limiter, worker.metrics()));
    chain.observers.push_back(std::make_shared<AccessLog>());
    return chain;
  };
  auto limiter_of = [registry](Worker& worker) -> std::shared_ptr<RedisRateLimiter> {
    std::lock_guard lock(registry->mutex);
    if (worker.index() >= registry->by_worker.size()) return nullptr;
    return registry->by_worker[worker.index()];
  };
  hooks.before_scrape = [limiter_of](Worker& worker) {
    if (auto limiter = limiter_of(worker)) limiter->export_metrics();
  };
  hooks.on_config = [limiter_of](Worker& worker, const std::shared_ptr<const Config>& next) {
    if (auto limiter = limiter_of(worker)) {
      limiter->reconfigure(next->redis);
      if (has_limits(*next)) limiter->connect();
    }
  };
  hooks.on_stop = [registry, limiter_of](Worker& worker) {
    if (auto limiter = limiter_of(worker)) limiter->close();
    // The limiter goes with the worker's chain, on its thread, before its io_context.
    std::lock_guard lock(registry->mutex);
    if (worker.index() < registry->by_worker.size()) registry->by_worker[worker.index()] = nullptr;
  };
  hooks.seed_metrics = [](const Config& config, MetricsShard& metrics) {
    seed_rate_limit_metrics(config, metrics);
  };
  hooks.readiness = [registry] {
    std::lock_guard lock(registry->mutex);
    if (registry->by_worker.empty()) return std::string{"{}"};
    std::size_t ready = 0;
    bool open = false;
    for (const auto& limiter : registry->by_worker) {
      if (!limiter) continue;
      ready += limiter->redis_ready() ? 1 : 0;
      open = open || limiter->circuit_open();
    }
    const std::size_t total = registry->by_worker.size();
    nlohmann::json deps = {
        {"redis", total > 0 && ready == total ? "ready" : (ready > 0 ? "partial" : "down")},
        {"redis_connections_ready", ready},
        {"redis_connections", total},
        {"redis_circuit_open", open},
    };
    return deps.dump();
  };
  return hooks;
}

}  // namespace sluice
