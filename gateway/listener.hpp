// A data-plane listener: binds server.listen (or server.tls.listen), accepts
// on the main thread with back-off, hands each connection to the next worker
// in turn, with the TLS contexts in force when it serves TLS, and keeps the
// open connections of all listeners under one cap (shedding idle keep-alive
// connections near it, refusing at it: a short 503 in plain HTTP, a close on
// TLS). Used on the main thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "gateway/acceptor.hpp"
#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"
#include "gateway/front_door.hpp"

namespace sluice {

class Worker;

class Listener {
 public:
  // What serves an accepted connection, on its worker's thread (the socket
  // belongs to the worker's io_context): a client session by default.
  using Serve = std::function<void(Worker&, WorkerSocket, std::shared_ptr<const ServerTls>)>;

  // `workers` and `metrics` (the main thread's shard) outlive the listener.
  // `name` labels sluice_accept_errors_total{listener}.
  Listener(boost::asio::io_context& io, const std::vector<std::unique_ptr<Worker>>& workers,
           MetricsShard& metrics, std::string_view name, Serve serve = start_client_session);

  // `key` names the configuration key in messages.
  bool bind(const HostPort& where, const char* key);
  bool is_bound() const { return acceptor_.is_open(); }
  // The TLS contexts new connections get (null: plain HTTP); a reload sets new ones.
  void set_tls(std::shared_ptr<const ServerTls> tls) { tls_ = std::move(tls); }
  const std::shared_ptr<const ServerTls>& tls() const { return tls_; }
  // Raises the descriptor limit and sets the connection cap to `configured`,
  // lowered (with a warning) to what the descriptors allow; returns the cap.
  std::size_t limit_connections(std::size_t configured);
  // The descriptor limit limit_connections found (the soft limit, raised).
  std::size_t descriptors() const { return descriptors_; }
  // The cap another listener worked out (all listeners share one).
  void set_connection_cap(std::size_t cap) { max_connections_ = cap; }
  std::size_t connection_cap() const { return max_connections_; }
  // Starts accepting; the workers must exist and be running.
  void start();
  // Stops accepting (the start of a drain).
  void close();
  boost::asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }

 private:
  void do_accept();
  void on_readable(boost::system::error_code ec);
  // Serves the accepted descriptor `fd` (owned from here) on the next worker,
  // or refuses it at the cap.
  void hand_over(int fd);
  bool admit_connection();
  void note_refusal();

  static constexpr std::chrono::seconds kRefusalLogEvery{5};

  const std::vector<std::unique_ptr<Worker>>& workers_;
  MetricsShard& metrics_;
  Serve serve_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::ip::tcp protocol_ = boost::asio::ip::tcp::v4();  // the listening socket's
  AcceptBackoff backoff_;
  std::shared_ptr<const ServerTls> tls_;
  std::size_t max_connections_ = 0;  // the cap in force
  std::size_t descriptors_ = 0;
  std::size_t unreported_refusals_ = 0;
  std::chrono::steady_clock::time_point next_refusal_log_{};
  std::size_t next_worker_ = 0;
};

}  // namespace sluice
