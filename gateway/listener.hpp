// The data-plane listener: binds server.listen, accepts on the main thread
// with back-off, hands each connection to the next worker in turn, and keeps
// the open connections under the cap (shedding idle keep-alive connections
// near it, refusing with a short 503 at it). Used on the main thread only.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "gateway/acceptor.hpp"
#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"
#include "gateway/session.hpp"

namespace sluice {

class Worker;

class Listener {
 public:
  // `workers` and `metrics` (the main thread's shard) outlive the listener.
  Listener(boost::asio::io_context& io, const std::vector<std::unique_ptr<Worker>>& workers,
           MetricsShard& metrics);

  bool bind(const HostPort& where);
  // Raises the descriptor limit and sets the connection cap to `configured`,
  // lowered (with a warning) to what the descriptors allow; returns the cap.
  std::size_t limit_connections(std::size_t configured);
  // Starts accepting; the workers must exist and be running.
  void start();
  // Stops accepting (the start of a drain).
  void close();
  boost::asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }

 private:
  void do_accept();
  void on_accept(Worker& worker, boost::system::error_code ec, WorkerSocket socket);
  bool admit_connection();

  const std::vector<std::unique_ptr<Worker>>& workers_;
  MetricsShard& metrics_;
  boost::asio::ip::tcp::acceptor acceptor_;
  AcceptBackoff backoff_;
  std::size_t max_connections_ = 0;  // the cap in force
  std::size_t next_worker_ = 0;
};

}  // namespace sluice
