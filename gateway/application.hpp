// The running gateway: workers, the data-plane listener, the admin listener,
// signals (SIGHUP reload, SIGTERM/SIGINT drain) and configuration swaps.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"
#include "gateway/middleware.hpp"

namespace sluice {

class Worker;

// Hooks through which main() plugs in what the gateway knows nothing of
// (the rate limiter and its Redis connection). All are optional.
struct ApplicationHooks {
  // Builds a worker's middleware chain; called on that worker's thread.
  std::function<MiddlewareChain(Worker&)> make_chain;
  // Called on each worker's thread just before its metrics are scraped.
  std::function<void(Worker&)> before_scrape;
  // A JSON object describing dependencies for /readyz (called on the main thread).
  std::function<std::string()> readiness;
  // Called on each worker's thread when a new configuration is swapped in.
  std::function<void(Worker&, const std::shared_ptr<const Config>&)> on_config;
  // Called on each worker's thread at shutdown, before its io_context stops.
  std::function<void(Worker&)> on_stop;
  // Declares a zero series for every label combination the middleware can
  // count under `config` (called on the main thread at startup and after
  // each reload, never per request).
  std::function<void(const Config&, MetricsShard&)> seed_metrics;
  // Set when --log-level was given: reloads then keep the level.
  bool log_level_from_command_line = false;
};

class Application {
 public:
  Application(std::string config_path, std::shared_ptr<const Config> config,
              ApplicationHooks hooks = {});
  ~Application();

  // Binds the listeners and starts the workers; false (with a logged error) on failure.
  bool start();
  // Serves until SIGTERM/SIGINT, then drains; returns the exit code.
  int run();
  // Stops from another thread (tests).
  void request_stop();

  std::uint16_t listen_port() const;
  std::uint16_t admin_port() const;

  class Impl;  // public so that the admin sessions in the .cpp can name it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
