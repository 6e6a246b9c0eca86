#include "middleware/setup.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "middleware/access_log.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/local_layer.hpp"
#include "middleware/ratelimit/rate_limit_middleware.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "upstream/redis/client_factory.hpp"

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
        limiter_(make_limiter(worker)),
        local_(std::make_shared<LocalLayer>(worker.executor, limiter_, worker.metrics,
                                            worker.config->local)) {
    if (has_limits(*worker.config)) limiter_->connect();
  }

  MiddlewareChain make_chain() override {
    MiddlewareChain chain;
    chain.steps.push_back(std::make_shared<RateLimitMiddleware>(local_, metrics_));
    chain.observers.push_back(std::make_shared<AccessLog>());
    return chain;
  }

  void before_scrape() override { limiter_->export_metrics(); }

  void on_config(const std::shared_ptr<const Config>& next) override {
    limiter_->reconfigure(next->redis);
    local_->reconfigure(next->local);
    if (has_limits(*next)) limiter_->connect();
  }

  // Leases go back to Redis before its connection closes; the worker's loop
  // runs until that call is answered or times out.
  void on_stop() override {
    local_->drain([limiter = limiter_] { limiter->close(); });
  }

  DependencyState readiness() const override {
    DependencyState state;
    state.ready = limiter_->redis_ready();
    state.circuit_open = limiter_->circuit_open();
    if (!state.ready) state.last_error = limiter_->last_error_message();
    for (auto& node : limiter_->nodes()) {
      state.endpoints.push_back(EndpointState{std::move(node.address), std::move(node.role),
                                              node.state == redis::State::kReady,
                                              std::string(redis::to_string(node.state)),
                                              node.slots, std::move(node.last_error)});
    }
    return state;
  }

 private:
  // The limiter is handed its client, and the factory of the client that
  // replaces it when a reload changes the Redis settings.
  static std::shared_ptr<RedisRateLimiter> make_limiter(const WorkerContext& worker) {
    const RedisConfig& redis = worker.config->redis;
    auto make_client = redis::client_factory(worker.executor);
    auto client = make_client(redis_options(redis));
    return std::make_shared<RedisRateLimiter>(worker.executor, redis, worker.metrics,
                                              std::move(client), std::move(make_client));
  }

  MetricsShard& metrics_;
  std::shared_ptr<RedisRateLimiter> limiter_;
  std::shared_ptr<LocalLayer> local_;
};

class MiddlewareServicesFactory final : public WorkerServicesFactory {
 public:
  std::unique_ptr<WorkerServices> make(const WorkerContext& worker) override {
    return std::make_unique<MiddlewareServices>(worker);
  }

  void seed_metrics(const Config& config, MetricsShard& metrics) const override {
    seed_rate_limit_metrics(config, metrics);
  }

  // A bucket key is a hash of the key value. Without a secret it is plain
  // SHA-256, and hashing all 2^32 IPv4 addresses finds the address of a bucket.
  void on_config_loaded(const Config& config) const override {
    if (!config.redis.key_secret.empty()) return;
    std::string names;
    for (const auto& limit : config.limits) {
      const bool by_ip = std::any_of(limit.key.begin(), limit.key.end(), [](const KeySource& k) {
        return k.kind == KeySource::Kind::kIp;
      });
      if (by_ip) names += (names.empty() ? "" : ", ") + limit.name;
    }
    if (names.empty()) return;
    spdlog::warn(
        "limits keyed by ip ({}) with no redis.key_secret_file: their Redis keys are plain "
        "SHA-256 hashes of client addresses, which anyone who can read Redis can reverse by "
        "hashing every IPv4 address; set redis.key_secret_file to hash them with HMAC-SHA-256",
        names);
  }

  // Redis is "ready" when every worker's connection is, "partial" when some are.
  nlohmann::json readiness(const std::vector<DependencyState>& workers) const override {
    if (workers.empty()) return nlohmann::json::object();
    std::size_t ready = 0;
    bool open = false;
    std::string error;
    for (const auto& worker : workers) {
      ready += worker.ready ? 1 : 0;
      open = open || worker.circuit_open;
      if (error.empty()) error = worker.last_error;
    }
    const std::size_t total = workers.size();
    nlohmann::json out = {
        {"redis", ready == total ? "ready" : (ready > 0 ? "partial" : "down")},
        {"redis_connections_ready", ready},
        {"redis_connections", total},
        {"redis_circuit_open", open},
        {"redis_nodes", merge_endpoints(workers)},
    };
    if (ready < total) out["redis_error"] = error;
    return out;
  }

 private:
  // One entry per server, in the order workers first name them: "ready" when
  // every worker that knows it reaches it, "down" when none does, else "partial".
  static nlohmann::json merge_endpoints(const std::vector<DependencyState>& workers) {
    struct Merged {
      const EndpointState* first;
      std::size_t ready = 0, seen = 0;
      std::string last_error;
    };
    std::vector<Merged> merged;
    for (const auto& worker : workers) {
      for (const auto& endpoint : worker.endpoints) {
        auto it = std::find_if(merged.begin(), merged.end(), [&](const Merged& m) {
          return m.first->address == endpoint.address && m.first->role == endpoint.role;
        });
        if (it == merged.end()) it = merged.insert(merged.end(), Merged{&endpoint, 0, 0, {}});
        ++it->seen;
        it->ready += endpoint.ready ? 1 : 0;
        if (it->last_error.empty() && !endpoint.ready) it->last_error = endpoint.last_error;
      }
    }
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& m : merged) {
      nlohmann::json node = {
          {"address", m.first->address},
          {"role", m.first->role},
          {"state", m.ready == m.seen ? "ready" : (m.ready > 0 ? "partial" : "down")},
      };
      if (m.first->slots > 0) node["slots"] = m.first->slots;
      if (!m.last_error.empty()) node["last_error"] = m.last_error;
      nodes.push_back(std::move(node));
    }
    return nodes;
  }
};

}  // namespace

std::shared_ptr<WorkerServicesFactory> make_middleware_services() {
  return std::make_shared<MiddlewareServicesFactory>();
}

}  // namespace sluice
