// GET /ratelimit/top?limit=L&window_s=60&n=20 on the admin listener: the
// callers with the most denials of limit L over the last window_s seconds
// across the fleet, most first: {"limit", "window_s", "keys": [{"key",
// "denials"}, ...]}. window_s 1 to 3600 (default 60, read as whole 10-second
// slots), n 1 to 1000 (default 20); an unknown limit, a bad number or a
// repeated parameter is a 400 problem+json. The admin handler posts the
// request to one worker, whose denial audit reads Redis (503 when it does
// not answer). Protected (admin_access.hpp). Counted per worker as
// sluice_admin_top_requests_total{result}.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "gateway/admin/admin_routes.hpp"
#include "gateway/config/config.hpp"
#include "middleware/ratelimit/admin/worker_registry.hpp"

namespace sluice {

class DenialAudit;
class MetricsShard;

// What the top endpoint uses of one worker (on that worker's executor only).
struct TopWorker {
  const std::shared_ptr<const Config>* config;
  std::shared_ptr<DenialAudit> audit;
  MetricsShard* metrics;
};
using TopWorkers = WorkerRegistry<TopWorker>;

struct TopQuery {
  std::string limit;
  std::int64_t window_s = 60;
  std::size_t n = 20;
};
struct TopQueryError {
  std::string detail;
};

// Reads the query of a top request (the part after '?') against `config`.
std::variant<TopQuery, TopQueryError> parse_top_query(std::string_view query, const Config& config);

void seed_top_api_metrics(MetricsShard& metrics);

// Adds GET (and HEAD) /ratelimit/top to `routes`.
void add_top_endpoint(AdminRoutes& routes, std::shared_ptr<TopWorkers> workers);

}  // namespace sluice
