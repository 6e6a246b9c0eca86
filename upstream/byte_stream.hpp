// A connection's byte stream, a client's or an upstream's: plain TCP, or TLS
// over it (the server side for a client, the client side for an upstream).
// One async_read_some / async_write_some for both, so that the HTTP parser,
// the relay and the session's writes need not know which; the TLS layer
// (TlsSocket) reads and writes the socket directly. Operations complete on the
// worker's executor. Full duplex (one read and one write at a time) either way.
#pragma once

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include <boost/asio/ssl/error.hpp>

#include "upstream/drained_read.hpp"
#include "upstream/stream_types.hpp"
#include "upstream/tls_socket.hpp"

namespace sluice {

class ByteStream {
 public:
  using executor_type = WorkerExecutor;
  using socket_type = WorkerStream::socket_type;
  using Tls = TlsStreamOps<socket_type>;

  explicit ByteStream(socket_type socket) : tcp_(std::move(socket)) {}
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  // Makes this a TLS stream, server side (a client's connection) or client
  // side (to an upstream), before any I/O over it; `owner` keeps `context`
  // alive. Returns the TLS state, to be prepared before the handshake.
  TlsSocket& use_tls(SSL_CTX* context, std::shared_ptr<const void> owner,
                     TlsSocket::Role role = TlsSocket::Role::kServer) {
    tls_owner_ = std::move(owner);
    tcp_.socket().non_blocking(true);  // OpenSSL calls the socket itself
    tls_session_.emplace(tcp_.socket().native_handle(), context, role);
    tls_.emplace(tcp_.socket(), *tls_session_);
    return *tls_session_;
  }
  bool is_tls() const { return tls_.has_value(); }
  // async_handshake and async_shutdown (and the reads and writes below).
  Tls& tls() { return *tls_; }
  TlsSocket& tls_session() { return *tls_session_; }

  // The client ended its stream: EOF, or over TLS a close without
  // close_notify (harmless where HTTP framing tells complete from cut short).
  static bool ended(const boost::system::error_code& ec) {
    return ec == boost::asio::error::eof || ec == boost::asio::ssl::error::stream_truncated;
  }

  // A TLS protocol error: an alert from the peer, or one OpenSSL raised.
  static bool tls_alert(const boost::system::error_code& ec) {
    return ec.category() == boost::asio::error::get_ssl_category();
  }

  // Writes what the kernel takes of `bytes` now, without waiting and without
  // a completion to run later: plain TCP only (0 over TLS, whose records
  // OpenSSL writes). `ec` is would_block when the socket's buffer is full.
  std::size_t write_now(boost::asio::const_buffer bytes, boost::system::error_code& ec) {
    if (tls_) return 0;
    auto& socket = tcp_.socket();
    if (!socket.non_blocking()) socket.non_blocking(true, ec);
    if (ec) return 0;
    return socket.write_some(bytes, ec);
  }
  // Whether write_now() stopped only because the socket's buffer was full.
  static bool would_block(const boost::system::error_code& ec) {
    return !ec || ec == boost::asio::error::would_block || ec == boost::asio::error::try_again;
  }

  executor_type get_executor() { return tcp_.get_executor(); }
  socket_type& socket() { return tcp_.socket(); }
  // The TCP stream under it (to connect it).
  WorkerStream& tcp() { return tcp_; }

  // Ends the sending side and keeps reading: over TLS a close_notify goes
  // first (without waiting for the peer's), so that the peer reads a clean end.
  void shutdown_send() {
    if (tls_session_ && tcp_.socket().is_open()) tls_session_->send_close_notify();
    boost::system::error_code ignored;
    tcp_.socket().shutdown(socket_type::shutdown_send, ignored);
  }

  // Over plain TCP into one buffer, a drained read (drained_read.hpp): once
  // the kernel said nothing is left, the next read waits for epoll instead
  // of trying the socket.
  template <class Buffers, class Handler>
  void async_read_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) {
      tls_->async_read_some(buffers, std::forward<Handler>(handler));
    } else if constexpr (std::is_convertible_v<const Buffers&, boost::asio::mutable_buffer>) {
      drained_.async_read(tcp_.socket(), boost::asio::mutable_buffer(buffers),
                          std::forward<Handler>(handler));
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
  DrainedReader drained_;
  std::shared_ptr<const void> tls_owner_;  // declared before tls_session_: outlives it
  std::optional<TlsSocket> tls_session_;
  std::optional<Tls> tls_;
};

}  // namespace sluice
