// What /readyz shows: whether the gateway takes traffic (200 "ready", or 503
// "not ready" while it starts or drains) and, under "dependencies", what the
// worker services report of their outside dependencies. Gathering asks every
// worker on its own thread and completes on the main thread within 250 ms: a
// worker that has not answered by then is shown with the state it last
// reported (not ready before its first answer).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

namespace sluice {

class Worker;
class WorkerServicesFactory;
struct DependencyState;

// `done` gets the "dependencies" object on `home`: the factory's merge of
// every worker's state, or {} without services. `last_known` (used and
// updated on `home` only, and outliving the call) holds each worker's last
// reported state, for a worker that does not answer in time.
void gather_dependencies(const std::vector<std::unique_ptr<Worker>>& workers,
                         boost::asio::io_context& home, const WorkerServicesFactory* services,
                         std::vector<DependencyState>& last_known,
                         std::function<void(nlohmann::json)> done);

// {"status":"ready"|"not ready","dependencies":…}, in that order, then
// "upstreams" (what the active health checks report) unless it is null. The
// health of upstreams does not change the status: an upstream with no healthy
// server makes its routes answer 503, not the whole gateway unready.
nlohmann::ordered_json readiness_document(bool ready, const nlohmann::json& dependencies,
                                          const nlohmann::json& upstreams = nullptr);

}  // namespace sluice
