// A worker: one thread, one io_context, its own upstream pools, services
// (worker_services.hpp), middleware chain and metrics shard. A client
// connection stays on one worker for life, so the request path takes no lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "gateway/config/config.hpp"
#include "gateway/mirror/route_mirrors.hpp"
#include "gateway/metrics.hpp"
#include "gateway/relay_buffers.hpp"
#include "gateway/middleware.hpp"
#include "gateway/request_series.hpp"
#include "gateway/route_split.hpp"
#include "gateway/worker_services.hpp"
#include "upstream/upstream_pool.hpp"

namespace sluice {

// What a worker needs of a live client session.
class ClientSession {
 public:
  virtual ~ClientSession() = default;
  virtual void on_drain() = 0;     // close when idle, no keep-alive after the current exchange
  virtual void force_close() = 0;  // close the socket now
  // While it waits for the next request on a kept-alive connection: since when.
  virtual std::optional<std::chrono::steady_clock::time_point> idle_since() const = 0;
};

class Worker {
 public:
  Worker(std::size_t index, std::shared_ptr<const Config> config);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  std::size_t index() const { return index_; }
  boost::asio::io_context& io() { return io_; }

  // Everything below is used on this worker's thread only.
  const std::shared_ptr<const Config>& config() const { return config_; }
  // A reloaded configuration: in force for new requests, then handed to the services.
  void set_config(std::shared_ptr<const Config> config);
  UpstreamPools& pools() { return pools_; }
  MetricsShard& metrics() { return metrics_; }
  RequestSeries& series() { return series_; }
  RouteSplits& splits() { return splits_; }
  RouteMirrors& mirrors() { return mirrors_; }
  MiddlewareChain& chain() { return chain_; }
  // Builds this worker's services and takes its middleware chain from them.
  void start_services(WorkerServicesFactory& factory);
  void before_scrape();
  // What the services report for /readyz; a default state once they are gone.
  DependencyState readiness() const;
  // Stops the services, then drops them with the chain (at shutdown, before release()).
  void stop_services();
  bool draining() const { return draining_; }

  void add_session(ClientSession* s);
  void remove_session(ClientSession* s);
  // A session tells when its connection becomes a WebSocket tunnel (+1) and
  // when the tunnel ends (-1).
  void tunnels_changed(int delta);
  // A session tells when it starts (+1) and stops (-1) waiting idle for a request.
  void idle_changed(int delta) { idle_count_.fetch_add(delta, std::memory_order_relaxed); }
  // Any thread may read these.
  std::size_t session_count() const { return session_count_.load(std::memory_order_relaxed); }
  std::size_t idle_count() const {
    const auto n = idle_count_.load(std::memory_order_relaxed);
    return n > 0 ? static_cast<std::size_t>(n) : 0;
  }
  // The most sessions open at once since the last call (any thread).
  std::size_t take_peak_session_count() {
    return peak_session_count_.exchange(session_count(), std::memory_order_relaxed);
  }
  // Closes up to `n` idle keep-alive connections, the longest idle first.
  void shed_idle(std::size_t n);

  // Relay buffers (kRelayBufferSize bytes) are lent to sessions for the
  // length of an exchange, so that an idle connection holds none (RelayBuffers).
  static constexpr std::size_t kRelayBufferSize = RelayBuffers::kBytes;
  // What a closed idle upstream connection freed, as the heap trim counts it.
  static constexpr std::size_t kClosedConnectionBytes = 8 * 1024;
  std::unique_ptr<char[]> take_relay_buffer();
  void return_relay_buffer(std::unique_ptr<char[]> buffer);
  // Any thread: has this worker free the relay buffers it kept unused since
  // the last call (RelayBuffers::age), counted in take_freed_bytes().
  void age_relay_buffers();
  // Bytes freed in bulk since the last call (any thread): relay buffers aged
  // out, and what the services report (WorkerContext::freed_bytes).
  std::size_t take_freed_bytes() { return freed_bytes_.exchange(0, std::memory_order_relaxed); }
  // Stops keep-alive: idle connections close now, busy ones after their exchange.
  void begin_drain();
  // Closes every connection at once (drain timeout).
  void close_all();

  void start();    // runs the thread
  void release();  // lets run() return once no work is left (graceful)
  void halt();     // stops the io_context now
  bool finished() const { return finished_.load(); }
  void join();

 private:
  std::size_t index_;
  // Sessions are destroyed with the io_context's pending handlers, so the
  // members they touch on the way out are declared (and outlive it) first.
  std::unordered_set<ClientSession*> sessions_;
  std::atomic<std::size_t> session_count_{0};
  std::atomic<std::int64_t> idle_count_{0};
  std::int64_t tunnels_ = 0;  // this worker's WebSocket tunnels (its thread only)
  std::atomic<std::size_t> peak_session_count_{0};
  std::atomic<std::size_t> freed_bytes_{0};
  RelayBuffers relay_buffers_;
  MetricsShard metrics_;
  RequestSeries series_{metrics_};
  RouteSplits splits_;
  RouteMirrors mirrors_;  // mirror copies destroyed with pending handlers leave it
  bool draining_ = false;
  // One thread runs it. The reactor keeps its per-socket locks: the listener
  // registers accepted sockets with it from the main thread, and a socket's
  // reactor state, recycled from one closed on this thread, may still be in
  // this thread's queue of events then (BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO
  // would make that a race).
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::shared_ptr<const Config> config_;
  UpstreamPools pools_;
  std::unique_ptr<WorkerServices> services_;
  MiddlewareChain chain_;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace sluice
