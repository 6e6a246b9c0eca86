#include "middleware/setup.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "middleware/access/access_middleware.hpp"
#include "middleware/auth/auth_middleware.hpp"
#include "middleware/auth/jwks_fetcher.hpp"
#include "middleware/access_log.hpp"
#include "middleware/ratelimit/admin/bucket_endpoint.hpp"
#include "middleware/ratelimit/audit/denial_audit.hpp"
#include "middleware/ratelimit/audit/top_endpoint.hpp"
#include "middleware/ratelimit/consumers/consumer_endpoint.hpp"
#include "middleware/ratelimit/consumers/consumer_subscription.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/fallback_store.hpp"
#include "middleware/ratelimit/local/fleet_heartbeat.hpp"
#include "middleware/ratelimit/local/local_layer.hpp"
#include "middleware/ratelimit/metrics.hpp"
#include "middleware/ratelimit/rate_limit_middleware.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "upstream/redis/client_factory.hpp"
#include "upstream/redis/redis_clock.hpp"

namespace sluice {
namespace {

// A configuration whose routes use no limit, and that serves no Envoy
// rate-limit service, needs no Redis connection up front.
bool has_limits(const Config& config) {
  if (config.rls) return true;
  for (const auto& route : config.routes) {
    if (route_limits(route)) return true;
  }
  return false;
}

// The fleet size is learned only when some route falls back locally and no
// size is configured: otherwise nobody reads it, and Redis sees no heartbeat.
bool learns_fleet_size(const Config& config) {
  if (config.local.fleet_size > 0) return false;
  return std::any_of(config.routes.begin(), config.routes.end(), [](const RouteConfig& route) {
    return route.on_redis_failure == FailureMode::kLocal && route_limits(route);
  });
}

// What the workers of one process share: the local fallback's buckets, the
// instance's member in the fleet, and where the bucket API finds the workers.
struct ProcessState {
  std::shared_ptr<FallbackStore> fallback = std::make_shared<FallbackStore>();
  std::string instance_id = random_instance_id();
  std::shared_ptr<BucketWorkers> buckets;
  std::shared_ptr<ConsumerWorkers> consumers;
  std::shared_ptr<TopWorkers> top;
  std::shared_ptr<LookupCoalescer> lookups = std::make_shared<LookupCoalescer>();
};

class MiddlewareServices final : public WorkerServices {
 public:
  MiddlewareServices(const WorkerContext& worker, const ProcessState& process)
      : executor_(worker.executor),
        metrics_(worker.metrics),
        limiter_(make_limiter(worker)),
        local_(std::make_shared<LocalLayer>(worker.executor, limiter_, worker.metrics,
                                            worker.config->local, steady_now_us,
                                            [&freed = worker.freed_bytes](std::size_t bytes) {
                                              freed.fetch_add(bytes, std::memory_order_relaxed);
                                            })),
        fallback_(process.fallback),
        consumers_(std::make_shared<ConsumerWorker>(worker.executor, worker.config, worker.metrics,
                                                    process.lookups)),
        audit_(std::make_shared<DenialAudit>(worker.executor, worker.config, worker.metrics,
                                             process.instance_id)),
        settler_(std::make_shared<Settler>(worker.executor, local_, worker.metrics)) {
    if (process.top) {
      top_ = std::make_shared<TopWorker>(TopWorker{&worker.config, audit_, &metrics_});
      process.top->add(worker.executor, top_);
    }
    if (process.consumers) process.consumers->add(worker.executor, consumers_);
    if (has_limits(*worker.config)) limiter_->connect();
    // One worker per process renews the heartbeat, on its own connection.
    if (worker.index == 0) {
      metrics_.add("sluice_fleet_heartbeat_failures_total", "", 0);
      heartbeat_ = std::make_shared<FleetHeartbeat>(
          worker.executor,
          [limiter = limiter_.get(), id = process.instance_id](bool leave, FleetHandler done) {
            limiter->fleet_heartbeat(id, kFleetHeartbeatTtl, leave, std::move(done));
          },
          fallback_,
          [&metrics = metrics_] { metrics.add("sluice_fleet_heartbeat_failures_total", ""); });
      heartbeat_->enable(learns_fleet_size(*worker.config));
    }
    // One worker per process keeps the JWKS URLs' keys fresh.
    if (worker.index == 0) {
      jwks_ = std::make_shared<JwksFetcher>(worker.executor, worker.metrics);
      jwks_->configure(*worker.config);
      jwks_->start();
    }
    // One worker per process hears the consumer store's change events.
    if (worker.index == 0 && process.consumers) {
      subscription_ = make_subscription(worker.executor, consumers_, process.consumers);
      subscription_->configure(*worker.config);
    }
    if (process.buckets) {
      buckets_ = std::make_shared<BucketWorker>(
          BucketWorker{&worker.config, local_, &metrics_, consumers_->resolver(), audit_});
      process.buckets->add(worker.executor, buckets_);
    }
  }

  MiddlewareChain make_chain() override {
    MiddlewareChain chain;
    chain.steps.push_back(std::make_shared<AccessMiddleware>(metrics_));
    chain.steps.push_back(std::make_shared<AuthMiddleware>(metrics_, [] {
      return static_cast<std::int64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count());
    }));
    chain.steps.push_back(std::make_shared<RateLimitMiddleware>(
        executor_, local_, metrics_, fallback_, consumers_->resolver(), audit_, settler_));
    access_log_ = std::make_shared<AccessLog>(executor_);
    chain.observers.push_back(access_log_);
    return chain;
  }

  void before_scrape() override {
    limiter_->export_metrics();
    metrics_.set("sluice_fleet_size", "", fallback_->fleet_size());
    metrics_.set("sluice_clock_skew_seconds", "", redis::clock_skew_seconds());
    metrics_.set("sluice_consumers_cached", "",
                 static_cast<double>(consumers_->resolver()->cached_consumers()));
  }

  void on_config(const std::shared_ptr<const Config>& next) override {
    if (access_log_) access_log_->flush();  // the lines waiting go under the old settings
    limiter_->reconfigure(next->redis);
    local_->reconfigure(next->local);
    if (has_limits(*next)) limiter_->connect();
    if (heartbeat_) heartbeat_->enable(learns_fleet_size(*next));
    consumers_->on_config();
    audit_->on_config();
    if (subscription_) subscription_->configure(*next);
    if (jwks_) jwks_->configure(*next);
  }

  // Leases go back to Redis, and the heartbeat's member is removed, before
  // the connection closes; the worker's loop runs until those calls are
  // answered or time out.
  void on_stop() override {
    if (jwks_) jwks_->close();
    if (access_log_) access_log_->flush();
    if (subscription_) subscription_->close();
    consumers_->close();
    audit_->close();
    settler_->drain();  // before the limiter's drain, which then waits for them
    auto close = [limiter = limiter_] { limiter->close(); };
    if (!heartbeat_) return local_->drain(close);
    local_->drain([heartbeat = heartbeat_, close] { heartbeat->leave(close); });
  }

  DependencyState readiness() const override {
    DependencyState state;
    state.ready = limiter_->redis_ready();
    state.circuit_open = limiter_->circuit_open();
    if (!state.ready) state.last_error = limiter_->last_error_message();
    for (auto& node : limiter_->nodes()) {
      state.endpoints.push_back(EndpointState{
          std::move(node.address), std::move(node.role), node.state == redis::State::kReady,
          std::string(redis::to_string(node.state)), node.slots, std::move(node.last_error)});
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

  // The subscription asks this worker's store connection which nodes it
  // reaches, and hands every event to every worker's cache.
  static std::shared_ptr<ConsumerSubscription> make_subscription(
      const boost::asio::any_io_executor& executor, const std::shared_ptr<ConsumerWorker>& own,
      const std::shared_ptr<ConsumerWorkers>& workers) {
    auto on_each = [workers](auto apply) {
      workers->each([&apply](const boost::asio::any_io_executor& ex,
                             const std::weak_ptr<ConsumerWorker>& weak) {
        boost::asio::post(ex, [weak, apply] {
          if (auto worker = weak.lock()) apply(*worker->resolver());
        });
      });
    };
    return std::make_shared<ConsumerSubscription>(
        executor,
        [weak = std::weak_ptr<ConsumerWorker>(own)] {
          auto worker = weak.lock();
          return worker ? worker->nodes() : std::vector<redis::NodeStatus>{};
        },
        [on_each](std::vector<std::string> fingerprints) {
          on_each([fingerprints](ConsumerResolver& resolver) {
            for (const auto& fingerprint : fingerprints) resolver.forget(fingerprint);
          });
        },
        [on_each] { on_each([](ConsumerResolver& resolver) { resolver.invalidate_all(); }); });
  }

  boost::asio::io_context::executor_type executor_;
  std::shared_ptr<AccessLog> access_log_;  // the chain's, flushed at stop
  MetricsShard& metrics_;
  std::shared_ptr<RedisRateLimiter> limiter_;
  std::shared_ptr<LocalLayer> local_;
  std::shared_ptr<FallbackStore> fallback_;
  std::shared_ptr<FleetHeartbeat> heartbeat_;  // worker 0 only
  std::shared_ptr<BucketWorker> buckets_;      // with the bucket API only
  std::shared_ptr<ConsumerWorker> consumers_;
  std::shared_ptr<ConsumerSubscription> subscription_;  // worker 0 only
  std::shared_ptr<DenialAudit> audit_;
  std::shared_ptr<TopWorker> top_;  // with the top endpoint only
  std::shared_ptr<JwksFetcher> jwks_;  // worker 0 only
  // Settlements (cost_from_response), one per worker whatever the reloads:
  // its retries outlive a chain, and the stop sends them before the drain.
  std::shared_ptr<Settler> settler_;
};

class MiddlewareServicesFactory final : public WorkerServicesFactory {
 public:
  explicit MiddlewareServicesFactory(AdminRegistries registries) {
    register_metric_families(access_metric_families());
    register_metric_families(auth_metric_families());
    register_metric_families(jwks_metric_families());
    register_metric_families(rate_limit_metric_families());
    process_.buckets = std::move(registries.buckets);
    process_.consumers = std::move(registries.consumers);
    process_.top = std::move(registries.top);
  }

  std::unique_ptr<WorkerServices> make(const WorkerContext& worker) override {
    return std::make_unique<MiddlewareServices>(worker, process_);
  }

  void seed_metrics(const Config& config, MetricsShard& metrics) const override {
    seed_access_metrics(config, metrics);
    seed_auth_metrics(config, metrics);
    seed_jwks_metrics(config, metrics);
    seed_rate_limit_metrics(config, metrics);
    if (process_.buckets) seed_bucket_api_metrics(metrics);
    if (process_.consumers) seed_consumer_api_metrics(metrics);
    if (process_.top) seed_top_api_metrics(metrics);
    metrics.declare("sluice_audit_dropped_total", "");
    metrics.declare("sluice_audit_appended_total", "");
    metrics.declare("sluice_ratelimit_top_dropped_total", "");
    for (const auto result : {"hit", "miss", "unknown", "error"}) {
      metrics.declare("sluice_consumer_lookups_total", scratch_labels({{"result", result}}));
    }
    metrics.declare("sluice_consumer_store_damaged_total", "");
  }

  // Process-wide settings of the local layer, and the warnings.
  void on_config_loaded(const Config& config) const override {
    process_.fallback->set_configured_fleet_size(config.local.fleet_size);
    process_.fallback->set_max_learned_fleet_size(config.local.max_fleet_size);
    process_.fallback->set_max_buckets(config.local.max_buckets);
    warn_plain_ip_keys(config);
  }

  // A bucket key is a hash of the key value. Without a secret it is plain
  // SHA-256, and hashing all 2^32 IPv4 addresses finds the address of a bucket.
  static void warn_plain_ip_keys(const Config& config) {
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
  bool has_dependencies(const Config& config) const override { return has_limits(config); }

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
  ProcessState process_;

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

std::shared_ptr<WorkerServicesFactory> make_middleware_services(AdminRegistries registries) {
  return std::make_shared<MiddlewareServicesFactory>(std::move(registries));
}

}  // namespace sluice
