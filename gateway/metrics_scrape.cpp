#include "gateway/metrics_scrape.hpp"

#include "gateway/process_metrics.hpp"
#include "gateway/session/exchange_log.hpp"
#include "gateway/worker_gather.hpp"
#include "gateway/worker_services.hpp"
#include "upstream/connection_budget.hpp"

namespace sluice {

MetricsShard seed_series(const Config& config, const WorkerServicesFactory* services) {
  MetricsShard seeds;
  for (const auto result : {"ok", "error"}) {
    seeds.declare("sluice_config_reloads_total", label("result", result));
  }
  seed_session_metrics(config, seeds);
  if (services) services->seed_metrics(config, seeds);
  return seeds;
}

void copy_worker_shards(const std::vector<std::unique_ptr<Worker>>& workers,
                        boost::asio::io_context& home,
                        std::function<void(std::vector<MetricsShard>)> done) {
  gather_from_workers(
      workers, home,
      [](Worker& worker) {
        worker.before_scrape();
        return worker.metrics();
      },
      std::move(done));
}

std::string render_scrape(const MetricsShard& seeds, const MetricsShard& main,
                          const std::vector<MetricsShard>& workers, const Config& config) {
  MetricsSnapshot snapshot;
  seeds.merge_into(snapshot);
  main.merge_into(snapshot);
  for (const auto& shard : workers) shard.merge_into(snapshot);
  // The upstream descriptor budget, which the workers share.
  MetricsShard budget_series;
  const auto& budget = connection_budget();
  budget_series.set("sluice_upstream_connections_open", "", static_cast<double>(budget.in_use()));
  budget_series.add("sluice_descriptor_reserve_hits_total", "",
                    static_cast<double>(budget.refusals()));
  budget_series.merge_into(snapshot);
  std::vector<std::string> routes;
  for (const auto& route : config.routes) routes.push_back(route.name);
  snapshot.cross_fill("sluice_http_requests_total", "route", routes);
  return snapshot.render() + render_process_metrics(read_process_stats());
}

}  // namespace sluice
