// A worker (style.md habit 11): one thread, one io_context, its own upstream
// pools, middleware chain and metrics shard. A client connection stays on one
// worker for life, so the request path takes no lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_set>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "gateway/config.hpp"
#include "gateway/metrics.hpp"
#include "gateway/middleware.hpp"
#include "upstream/upstream_pool.hpp"

namespace sluice {

// What a worker needs of a live client session.
class ClientSession {
 public:
  virtual ~ClientSession() = default;
  virtual void on_drain() = 0;     // close when idle, no keep-alive after the current exchange
  virtual void force_close() = 0;  // close the socket now
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
  void set_config(std::shared_ptr<const Config> config) { config_ = std::move(config); }
  UpstreamPools& pools() { return pools_; }
  MetricsShard& metrics() { return metrics_; }
  MiddlewareChain& chain() { return chain_; }
  bool draining() const { return draining_; }

  void add_session(ClientSession* s);
  void remove_session(ClientSession* s);
  // Any thread may read this.
  std::size_t session_count() const { return session_count_.load(std::memory_order_relaxed); }
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
  MetricsShard metrics_;
  bool draining_ = false;
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::shared_ptr<const Config> config_;
  UpstreamPools pools_;
  MiddlewareChain chain_;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace sluice
