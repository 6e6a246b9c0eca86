#include "gateway/readiness.hpp"

#include "gateway/worker_gather.hpp"
#include "gateway/worker_services.hpp"

namespace sluice {

void gather_dependencies(const std::vector<std::unique_ptr<Worker>>& workers,
                         boost::asio::io_context& home, const WorkerServicesFactory* services,
                         std::function<void(nlohmann::json)> done) {
  if (!services) return done(nlohmann::json::object());
  gather_from_workers(
      workers, home, [](Worker& worker) { return worker.readiness(); },
      [services, done = std::move(done)](std::vector<DependencyState> states) {
        done(services->readiness(states));
      });
}

nlohmann::ordered_json readiness_document(bool ready, const nlohmann::json& dependencies) {
  nlohmann::ordered_json document;
  document["status"] = ready ? "ready" : "not ready";
  document["dependencies"] = dependencies;
  return document;
}

}  // namespace sluice
