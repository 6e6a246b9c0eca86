// What /metrics shows: every worker's shard, copied on its own thread, merged
// on the main thread with the main thread's shard and the zero series of the
// running configuration, then rendered with the process metrics.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"

namespace sluice {

class Worker;
class WorkerServicesFactory;

// A zero series for every label combination the gateway and the services
// (when there are any) can count under `config`: at startup and after each reload.
MetricsShard seed_series(const Config& config, const WorkerServicesFactory* services);

// Copies every worker's shard on its own thread, after its services'
// before_scrape; `done` gets the copies in worker order, on `home`.
void copy_worker_shards(const std::vector<std::unique_ptr<Worker>>& workers,
                        boost::asio::io_context& home,
                        std::function<void(std::vector<MetricsShard>)> done);

// The exposition text: `seeds` under `main` under the workers' shards; every
// route of `config` gets a series for every status code any route has answered.
std::string render_scrape(const MetricsShard& seeds, const MetricsShard& main,
                          const std::vector<MetricsShard>& workers, const Config& config);

}  // namespace sluice
