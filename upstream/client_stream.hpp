// A client connection's byte stream: plain TCP, or TLS over it. One
// async_read_some / async_write_some for both, so that the HTTP parser, the
// relay and the session's writes need not know which; the TLS layer works on
// the socket directly. Operations complete on the worker's executor. Full
// duplex (one read and one write at a time) either way.
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_stream.hpp>

#include "upstream/upstream_pool.hpp"

namespace sluice {

class ClientStream {
 public:
  using executor_type = WorkerExecutor;
  using socket_type = WorkerStream::socket_type;
  using Tls = boost::asio::ssl::stream<socket_type&>;

  explicit ClientStream(socket_type socket) : tcp_(std::move(socket)) {}
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  // Makes this a TLS server stream, before any I/O; `owner` keeps `context` alive.
  void use_tls(boost::asio::ssl::context& context, std::shared_ptr<const void> owner) {
    tls_owner_ = std::move(owner);
    tls_.emplace(tcp_.socket(), context);
  }
  bool is_tls() const { return tls_.has_value(); }
  Tls& tls() { return tls_->next_layer(); }

  // The client ended its stream: EOF, or over TLS a close without
  // close_notify (harmless where HTTP framing tells complete from cut short).
  static bool ended(const boost::system::error_code& ec) {
    return ec == boost::asio::error::eof || ec == boost::asio::ssl::error::stream_truncated;
  }

  executor_type get_executor() { return tcp_.get_executor(); }
  socket_type& socket() { return tcp_.socket(); }

  template <class Buffers, class Handler>
  void async_read_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) {
      tls_->async_read_some(buffers, std::forward<Handler>(handler));
    } else {
      tcp_.async_read_some(buffers, std::forward<Handler>(handler));
    }
  }

  template <class Buffers, class Handler>
  void async_write_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) {
      tls_->async_write_some(buffers, std::forward<Handler>(handler));
    } else {
      tcp_.async_write_some(buffers, std::forward<Handler>(handler));
    }
  }

 private:
  WorkerStream tcp_;
  std::shared_ptr<const void> tls_owner_;  // declared before tls_: outlives it
  // A write of several buffers (a head and a body piece) goes out as one TLS
  // record where it fits, not one record and one system call per buffer.
  std::optional<boost::beast::flat_stream<Tls>> tls_;
};

}  // namespace sluice
