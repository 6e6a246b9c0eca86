#include "services/rls/rls_service.hpp"

#include <boost/asio/post.hpp>

#include "gateway/config/rls_config.hpp"
#include "gateway/worker.hpp"
#include "middleware/ratelimit/admin/bucket_endpoint.hpp"
#include "services/rls/rls_connection.hpp"

namespace sluice {
namespace {

constexpr MetricFamily kRlsFamilies[] = {
    {"sluice_rls_calls_total", "counter",
     "ShouldRateLimit calls answered, by domain (a configured one, or unknown) and code (ok, "
     "over_limit, or error: Redis failed and rls.on_redis_failure is error)."},
    {"sluice_rls_descriptors_total", "counter",
     "Descriptors of ShouldRateLimit calls, by domain, rule (its place in the tree) and result "
     "(ok, over_limit, shadow_over_limit, unlimited, replaced, no_rule, exempt, unknown_key, "
     "disabled, skipped, released, release_failed)."},
};

}  // namespace

ServiceListener rls_listener(std::shared_ptr<BucketWorkers> workers) {
  register_metric_families(kRlsFamilies);
  ServiceListener spec;
  spec.name = "rls";
  spec.key = "rls.listen";
  spec.where = [](const Config& config) -> std::optional<HostPort> {
    return config.rls ? config.rls->listen : std::nullopt;
  };
  spec.tls = [](const Config& config) -> std::shared_ptr<const ServerTls> {
    return config.rls ? config.rls->tls : nullptr;
  };
  spec.serve = [workers](Worker& worker, WorkerSocket socket,
                         std::shared_ptr<const ServerTls> tls) {
    const boost::asio::any_io_executor mine = worker.io().get_executor();
    std::weak_ptr<BucketWorker> found;
    workers->each([&](const boost::asio::any_io_executor& executor,
                      const std::weak_ptr<BucketWorker>& weak) {
      if (executor == mine) found = weak;
    });
    serve_rls_connection(std::move(socket), std::move(tls), std::move(found));
  };
  spec.drain = [workers] {
    workers->each([](const boost::asio::any_io_executor& executor,
                     const std::weak_ptr<BucketWorker>&) {
      boost::asio::post(executor, [] { drain_rls_connections(); });
    });
  };
  return spec;
}

}  // namespace sluice
