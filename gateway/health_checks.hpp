// The active health checks of the running configuration: one checker per
// server of every upstream that has a health_check, per process (not per
// worker). Everything here runs on the main thread's io_context, where the
// checkers report: each result moves the server's state machine, its shared
// flag (what the workers' round robin reads, without a lock), its series and,
// on a change, one log line.
//
// apply() follows a configuration: a server checked before and after keeps
// its state and counts (its checker restarts only if its check changed);
// the others start healthy or stop. stop() ends every checker.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"
#include "upstream/health/upstream_health.hpp"

namespace boost::asio {
class io_context;
}

namespace sluice {

class HealthChecks {
 public:
  explicit HealthChecks(boost::asio::io_context& io);
  ~HealthChecks();
  HealthChecks(const HealthChecks&) = delete;
  HealthChecks& operator=(const HealthChecks&) = delete;

  // Starts, keeps or stops checkers for `config`; the flags the workers
  // are to use with it.
  std::shared_ptr<const UpstreamHealth> apply(const Config& config);
  void stop();

  // sluice_upstream_healthy and sluice_upstream_health_checks_total of every
  // checked server, and the outlier series of every server under outlier
  // detection (sluice_upstream_server_requests_total, _errors_total,
  // sluice_upstream_ejections_total, sluice_upstream_ejected), added to `into`.
  void add_series(MetricsShard& into) const;
  // {"NAME": {"healthy_servers": N, "servers": [{"server": "host:port", "healthy": true}]}},
  // upstreams in name order; null when no server is checked.
  nlohmann::json readiness() const;

 private:
  struct Entry;
  void on_result(Entry& entry, bool ok, const std::string& detail);
  void apply_outliers(const Config& config, UpstreamHealth& health);

  boost::asio::io_context& io_;
  // By (upstream name, "host:port").
  std::map<std::pair<std::string, std::string>, std::unique_ptr<Entry>> entries_;
  // The flags of servers under outlier detection that are not checked
  // (kept across reloads as the checked ones are), and every server under
  // outlier detection, checked or not, for its series.
  std::map<std::pair<std::string, std::string>, std::shared_ptr<ServerHealth>> passive_;
  struct Outlier {
    std::string upstream;
    std::string address;
    std::shared_ptr<ServerHealth> flag;
  };
  std::vector<Outlier> outliers_;
};

}  // namespace sluice
