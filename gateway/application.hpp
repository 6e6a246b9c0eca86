// The running gateway's lifecycle: start (workers, the data-plane and admin
// listeners), signals (SIGHUP reloads the configuration file, SIGTERM/SIGINT
// drain), reload, drain and stop. Everything but the workers runs on the
// thread that calls run(). What the gateway knows nothing of (the middleware
// and what it depends on) comes in through a WorkerServicesFactory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/admin/admin_routes.hpp"
#include "gateway/config/config.hpp"
#include "gateway/listener.hpp"

namespace sluice {

class WorkerServicesFactory;

// A listener besides the data plane's and the admin's, whose connections the
// workers serve with a service the gateway knows nothing of (the Envoy
// rate-limit service). Bound at start when `where` gives an address; closed
// when the drain begins; a reload keeps its address and sets its TLS anew.
struct ServiceListener {
  std::string name;  // labels sluice_accept_errors_total{listener}
  std::string key;   // the configuration key, in messages ("rls.listen")
  std::function<std::optional<HostPort>(const Config&)> where;
  std::function<std::shared_ptr<const ServerTls>(const Config&)> tls;  // null: plain
  Listener::Serve serve;
  // At the drain's start (main thread): the service ends its connections
  // gracefully; null: they end with the workers.
  std::function<void()> drain;
};

struct ApplicationOptions {
  // Builds each worker's services; without it, workers run an empty chain.
  std::shared_ptr<WorkerServicesFactory> services;
  std::vector<ServiceListener> listeners;
  // Set when --log-level was given: reloads then keep the level.
  bool log_level_from_command_line = false;
};

class Application {
 public:
  Application(std::string config_path, std::shared_ptr<const Config> config,
              ApplicationOptions options = {});
  ~Application();

  // The admin endpoints, with /healthz, /readyz and /metrics already there;
  // more may be added before start().
  AdminRoutes& admin_routes();

  // Binds the listeners and starts the workers; false (with a logged error) on failure.
  bool start();
  // Serves until SIGTERM/SIGINT, then drains; returns the exit code.
  int run();
  // Stops from another thread (tests).
  void request_stop();

  std::uint16_t listen_port() const;
  std::uint16_t admin_port() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
