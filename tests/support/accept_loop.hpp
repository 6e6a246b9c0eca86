// The accepting side of the project's small servers (sluice-echo, the
// WebSocket echo of sluice-wsbench): a listening socket that hands every
// accepted connection, with TCP_NODELAY set, to `on_socket`, and backs off
// 10 ms after an accept error (out of descriptors) instead of spinning.
// Completes on the io_context it was given, which must outlive it.
#pragma once

#include <chrono>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

namespace sluice::test {

template <class OnSocket>
class AcceptLoop {
 public:
  using tcp = boost::asio::ip::tcp;

  AcceptLoop(boost::asio::io_context& ioc, const tcp::endpoint& endpoint, OnSocket on_socket)
      : acceptor_(ioc), timer_(ioc), on_socket_(std::move(on_socket)) {
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(boost::asio::socket_base::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(boost::asio::socket_base::max_listen_connections);
  }

  tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }

  void do_accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) {
        timer_.expires_after(std::chrono::milliseconds(10));
        timer_.async_wait([this](boost::system::error_code) { do_accept(); });
        return;
      }
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      on_socket_(std::move(socket));
      do_accept();
    });
  }

 private:
  tcp::acceptor acceptor_;
  boost::asio::steady_timer timer_;
  OnSocket on_socket_;
};

}  // namespace sluice::test
