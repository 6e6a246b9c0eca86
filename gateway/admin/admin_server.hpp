// The admin listener: binds admin.listen, accepts with back-off, and serves
// each connection with a small HTTP/1.1 session (keep-alive, HEAD, a
// deadline per read and write, 8 KiB head, 1 MiB body) that hands every
// request to AdminRoutes. A request the routes refuse by its head (a missing
// token, a browser's request) is answered before any byte of its body is
// read, and its connection then closes. At most kMaxConnections at once.
// Idle connections must not starve a health probe: a connection has
// kFirstRequestTimeout for its first request (kIdleTimeout between later
// ones), and a connection accepted at the cap closes the one that has waited
// longest for a request, so that only connections busy with a request can
// keep a new one out.
// Everything runs on the main thread; a handler's reply may come from any
// thread and is written from the main thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "gateway/acceptor.hpp"
#include "gateway/admin/admin_routes.hpp"
#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"

namespace sluice {

class AdminServer {
 public:
  static constexpr std::size_t kMaxConnections = 64;
  static constexpr std::chrono::seconds kFirstRequestTimeout{5};
  static constexpr std::chrono::seconds kIdleTimeout{30};

  // The open sessions, each waiting for a request (since when) or busy with one.
  class Sessions;

  // `routes` and `metrics` (the main thread's shard) outlive the server's sessions.
  AdminServer(boost::asio::io_context& io, const AdminRoutes& routes, MetricsShard& metrics);

  bool bind(const HostPort& where);
  void start();
  // Stops accepting; open sessions end with the io_context.
  void close();
  boost::asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }

 private:
  void do_accept();

  const AdminRoutes& routes_;
  MetricsShard& metrics_;
  boost::asio::ip::tcp::acceptor acceptor_;
  AcceptBackoff backoff_;
  // Shared with the sessions, which may be destroyed with the io_context after the server.
  std::shared_ptr<Sessions> sessions_;
};

}  // namespace sluice
