// The byte stream under a Redis connection: plain TCP or TLS over TCP, and the
// TLS client context built from the options (TLS 1.2+, the server verified
// against ca_file or the system store, an optional client certificate).
// Operations complete on the executor the stream was made with.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "upstream/redis/options.hpp"

namespace sluice::redis {

// The TLS context for `options`, or nullptr without TLS. A context that could
// not be set up (unreadable CA, certificate or key file) is still returned and
// `error` says why: every connect attempt then fails with kTls.
std::shared_ptr<boost::asio::ssl::context> make_tls_context(const Options& options,
                                                            std::string& error);

// Errors that come from the TLS layer rather than the socket.
bool is_tls_error(const boost::system::error_code& ec);

class Stream {
 public:
  using tcp = boost::asio::ip::tcp;

  // TLS when `tls_context` is set (it must outlive the stream: held here).
  Stream(const boost::asio::any_io_executor& executor,
         std::shared_ptr<boost::asio::ssl::context> tls_context);

  tcp::socket& socket() { return tls_ ? tls_->next_layer() : *plain_; }
  bool is_tls() const { return tls_.has_value(); }

  // Before the TLS handshake: SNI (names only, never IP literals), then peer
  // verification of the chain and of `verify_name`.
  boost::system::error_code prepare_tls(const std::string& verify_name);

  template <class Handler>
  void async_handshake(Handler&& handler) {
    tls_->async_handshake(boost::asio::ssl::stream_base::client, std::forward<Handler>(handler));
  }

  template <class Handler>
  void async_write(boost::asio::const_buffer buffer, Handler&& handler) {
    if (tls_) {
      boost::asio::async_write(*tls_, buffer, std::forward<Handler>(handler));
    } else {
      boost::asio::async_write(*plain_, buffer, std::forward<Handler>(handler));
    }
  }

  template <class Handler>
  void async_read_some(boost::asio::mutable_buffer buffer, Handler&& handler) {
    if (tls_) {
      tls_->async_read_some(buffer, std::forward<Handler>(handler));
    } else {
      plain_->async_read_some(buffer, std::forward<Handler>(handler));
    }
  }

  void close();

 private:
  std::shared_ptr<boost::asio::ssl::context> tls_context_;  // declared first: outlives the stream
  std::optional<tcp::socket> plain_;
  std::optional<boost::asio::ssl::stream<tcp::socket>> tls_;
};

}  // namespace sluice::redis
