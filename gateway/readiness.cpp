#include "gateway/readiness.hpp"

#include "gateway/worker_gather.hpp"
#include "gateway/worker_services.hpp"

namespace sluice {
namespace {

// A worker that has not answered by then (busy, or its loop stopped) is shown
// with the state it last reported, so that /readyz answers within a health
// probe's timeout.
constexpr std::chrono::milliseconds kGatherDeadline{250};

}  // namespace

void gather_dependencies(const std::vector<std::unique_ptr<Worker>>& workers,
                         boost::asio::io_context& home, const WorkerServicesFactory* services,
                         std::vector<DependencyState>& last_known,
                         std::function<void(nlohmann::json)> done) {
  if (!services) return done(nlohmann::json::object());
  gather_from_workers(
      workers, home, [](Worker& worker) { return worker.readiness(); },
      [services, &last_known, done = std::move(done)](std::vector<DependencyState> states) {
        last_known = states;
        done(services->readiness(states));
      },
      kGatherDeadline, last_known);
}

nlohmann::ordered_json readiness_document(bool ready, const nlohmann::json& dependencies,
                                          const nlohmann::json& upstreams) {
  nlohmann::ordered_json document;
  document["status"] = ready ? "ready" : "not ready";
  document["dependencies"] = dependencies;
  if (!upstreams.is_null()) document["upstreams"] = upstreams;
  return document;
}

}  // namespace sluice
