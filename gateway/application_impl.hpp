// The application's state and its steps (application.cpp: start, signals,
// reload, drain, stop; application_admin.cpp: the endpoints it serves on the
// admin listener). Used on the main thread.
#pragma once

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/admin/admin_routes.hpp"
#include "gateway/admin/admin_server.hpp"
#include "gateway/application.hpp"
#include "gateway/health_checks.hpp"
#include "gateway/listener.hpp"
#include "gateway/memory_trim.hpp"
#include "gateway/readiness.hpp"
#include "gateway/service_notify.hpp"
#include "gateway/worker.hpp"

namespace sluice {

class Application::Impl {
 public:
  Impl(std::string path, std::shared_ptr<const Config> config, ApplicationOptions options)
      : path_(std::move(path)), config_(std::move(config)), options_(std::move(options)) {
    add_admin_endpoints();
  }

  AdminRoutes& admin_routes() { return admin_routes_; }
  bool start();
  int run();
  void request_stop() {
    boost::asio::post(main_io_, [this] { begin_shutdown(); });
  }
  const Listener& listener() const { return listener_; }
  const AdminServer& admin_server() const { return admin_server_; }

 private:
  void add_admin_endpoints();
  void set_admin_access();
  bool bind_listeners();
  void reload_tls(const Config& next);
  void reload_service_listeners(const Config& next);
  void start_workers();
  void follow_health_checks();
  void wait_signal();
  void reload();
  void begin_shutdown();
  void wait_drained(std::chrono::steady_clock::time_point deadline);
  void finish_shutdown();
  void announce_ready(std::chrono::steady_clock::time_point deadline);

  std::string path_;
  std::shared_ptr<const Config> config_;
  ApplicationOptions options_;
  AdminRoutes admin_routes_;
  MetricsShard main_metrics_;  // main-thread metrics (listeners, reloads)
  // Zero series of the running config, rebuilt on reload (so a removed route's
  // series that never moved go away); merged under the others at scrape time.
  MetricsShard seed_metrics_;
  // Declared before the workers, so that it outlives them: a worker's answer to
  // a gather (readiness, scrape) is posted back to it.
  boost::asio::io_context main_io_{1};
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<DependencyState> last_readiness_;  // each worker's last answer to /readyz
  Listener listener_{main_io_, workers_, main_metrics_, "server"};
  // server.tls.listen, when TLS is served beside a plain server.listen.
  Listener tls_listener_{main_io_, workers_, main_metrics_, "tls"};
  std::string tls_place_;  // tls_place() of the configuration started with
  // ApplicationOptions::listeners that had an address, in that order.
  struct BoundService {
    const ServiceListener* spec;
    std::unique_ptr<Listener> listener;
    std::string address;  // as bound at start
  };
  std::vector<BoundService> service_listeners_;
  AdminServer admin_server_{main_io_, admin_routes_, main_metrics_};
  boost::asio::signal_set signals_{main_io_, SIGINT, SIGTERM, SIGHUP};
  boost::asio::steady_timer drain_timer_{main_io_};
  ServiceNotifier notifier_;  // systemd's Type=notify, when it started us
  boost::asio::steady_timer ready_timer_{main_io_};
  MemoryTrim memory_trim_{main_io_, workers_};
  HealthChecks health_checks_{main_io_};
  bool stopping_ = false;
  bool ready_ = false;
};

}  // namespace sluice
