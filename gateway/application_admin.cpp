// The endpoints the application serves on the admin listener, and who may
// call the protected ones.
#include <boost/beast/http/status.hpp>

#include "gateway/admin/admin_access.hpp"
#include "gateway/application_impl.hpp"
#include "gateway/metrics_scrape.hpp"
#include "gateway/worker_gather.hpp"

namespace sluice {

namespace http = boost::beast::http;

// /healthz answers while the process does; /readyz says whether traffic is
// taken and what the services report of their dependencies; /metrics scrapes.
void Application::Impl::add_admin_endpoints() {
  admin_routes_.add("/healthz", [](const AdminCall&, AdminReply reply) {
    reply(json_response(http::status::ok, {{"status", "ok"}}));
  });
  admin_routes_.add("/readyz", [this](const AdminCall&, AdminReply reply) {
    gather_dependencies(
        workers_, main_io_, options_.services.get(), last_readiness_,
        [this, reply = std::move(reply)](nlohmann::json dependencies) {
          const bool ready = ready_ && !stopping_;
          reply(json_response(ready ? http::status::ok : http::status::service_unavailable,
                              readiness_document(ready, dependencies, health_checks_.readiness())));
        });
  });
  admin_routes_.add("/metrics", [this](const AdminCall&, AdminReply reply) {
    copy_worker_shards(
        workers_, main_io_, [this, reply = std::move(reply)](std::vector<MetricsShard> shards) {
          health_checks_.add_series(shards.emplace_back());
          reply(admin_response(http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                               render_scrape(seed_metrics_, main_metrics_, shards, *config_)));
        });
  });
}

// The protected endpoints follow the admin token and hosts in force and the
// address the admin listener is bound to (which a reload does not change);
// handlers get the configuration in force.
void Application::Impl::set_admin_access() {
  admin_routes_.set_access(AdminAccess{config_->admin.token,
                                       admin_server_.local_endpoint().address().is_loopback(),
                                       config_->admin.hosts});
  admin_routes_.set_config(config_);
}

}  // namespace sluice
