// What a worker runs besides the gateway itself: its middleware chain and
// whatever that chain depends on (a rate limiter and its connection, say). The
// composition root hands the Application a WorkerServicesFactory; each worker
// builds its own services with it and calls them on its own thread only, so
// the services take no lock. The gateway knows them only through this header.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json_fwd.hpp>

#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"
#include "gateway/middleware.hpp"

namespace sluice {

// What services may use of the worker that builds them; every part outlives the services.
struct WorkerContext {
  std::size_t index;
  boost::asio::io_context::executor_type executor;
  const std::shared_ptr<const Config>& config;  // the configuration in force now
  MetricsShard& metrics;                        // the worker's shard
  // Memory the services freed in bulk (a table emptied), in bytes: added to
  // on the worker's thread, read by the process's memory trim (any thread).
  std::atomic<std::size_t>& freed_bytes;
};

// One server behind a dependency (a Redis node), as one worker sees it.
struct EndpointState {
  std::string address;     // host:port
  std::string role;        // what it is to the dependency ("primary", "sentinel", ...)
  bool ready = false;      // the worker's connection to it can take commands now
  std::string state;       // the connection's state in words
  std::size_t slots = 0;   // its share of the work (cluster slots), 0 when not split
  std::string last_error;  // why it last failed, if it has
};

// One worker's view of an outside dependency, for /readyz.
struct DependencyState {
  bool ready = false;         // its connection can take commands now
  bool circuit_open = false;  // calls to it are refused without being tried
  std::string last_error;     // why it is not ready, when it is not
  std::vector<EndpointState> endpoints;
};

// One worker's services. Every call comes on that worker's thread.
class WorkerServices {
 public:
  virtual ~WorkerServices() = default;
  // The worker's middleware chain; asked once, right after the services are built.
  virtual MiddlewareChain make_chain() = 0;
  // Just before the worker's metrics shard is copied for a scrape.
  virtual void before_scrape() {}
  // A reloaded configuration, already in force for new requests of this worker.
  virtual void on_config(const std::shared_ptr<const Config>&) {}
  // At shutdown, before the chain and the services go and the io_context stops.
  virtual void on_stop() {}
  virtual DependencyState readiness() const { return {}; }
};

class WorkerServicesFactory {
 public:
  virtual ~WorkerServicesFactory() = default;
  // Builds one worker's services; called on that worker's thread.
  virtual std::unique_ptr<WorkerServices> make(const WorkerContext& worker) = 0;
  // Declares a zero series for every label combination the services can count
  // under `config` (main thread, at startup and after each reload, never per request).
  virtual void seed_metrics(const Config& config, MetricsShard& metrics) const = 0;
  // A configuration about to be put in force, at startup or on a reload (main
  // thread): where the services log what they find risky in it.
  virtual void on_config_loaded(const Config&) const {}
  // Whether the services under `config` depend on something outside the
  // process (a start waits a little for it before it says it is ready).
  virtual bool has_dependencies(const Config&) const { return false; }
  // The "dependencies" object of /readyz from every worker's state, in worker
  // order; a worker whose services are gone reports a default state (main thread).
  virtual nlohmann::json readiness(const std::vector<DependencyState>& workers) const = 0;
};

}  // namespace sluice
