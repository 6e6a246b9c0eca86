// The series every exchange counts: requests by route and status code, the
// request duration by route, and upstream exchanges by upstream and outcome.
// Each is resolved to its counter in the worker's MetricsShard once per route
// (or upstream) and config, so counting an exchange is an increment rather
// than rendering labels and hashing them. Used on one worker's thread only.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"
#include "upstream/upstream_error.hpp"

namespace sluice {

class RequestSeries {
 public:
  explicit RequestSeries(MetricsShard& shard) : shard_(shard) {}

  // One finished request. `route` is one of config's routes, or null when no
  // route matched (the series' route label is then empty).
  void count_request(const std::shared_ptr<const Config>& config, const RouteConfig* route,
                     unsigned status, double seconds);
  // One exchange with upstream `upstream` of config.
  void count_upstream(const std::shared_ptr<const Config>& config, const UpstreamConfig& upstream,
                      UpstreamOutcome outcome);

 private:
  struct Code {
    unsigned status = 0;
    double* count = nullptr;
  };
  struct Route {
    Histogram* duration = nullptr;
    std::array<Code, 4> codes{};  // the statuses seen most; others go the slow way
    std::size_t next_slot = 0;
  };
  struct Upstream {
    double* ok = nullptr;
  };

  // Drops what was resolved for another config.
  void use(const std::shared_ptr<const Config>& config);

  MetricsShard& shard_;
  std::shared_ptr<const Config> config_;  // what routes_ and upstreams_ were resolved for
  std::vector<Route> routes_;             // by route index; the last one: no route
  std::vector<Upstream> upstreams_;       // by upstream index
};

}  // namespace sluice
