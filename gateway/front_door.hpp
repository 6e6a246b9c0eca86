// Where an accepted client connection starts: it owns the connection's byte
// stream for life and hands the connection to the session that speaks its
// protocol. A plain connection goes to the HTTP/1.1 session at once (which
// hands it back, through serve_http2, when HTTP/2's connection preface comes
// in place of a request line: h2c with prior knowledge). A TLS connection
// shakes hands here first, within header_timeout_ms like a request head, and
// goes to the HTTP/2 session when ALPN chose "h2", else to the HTTP/1.1 one;
// a failed handshake closes it quietly (counted). Its TLS state (OpenSSL's,
// about 45 KiB once a handshake starts) is made only once the client's first
// byte is readable, as nginx does: until then a connection that sends
// nothing costs what a plain one does, and, like an idle connection, is
// closed at once by a drain.
//
// Until it hands the connection over, the front door is the worker's client
// session for it; afterwards the session holds it alive as the stream's
// owner. Every handler runs on the worker's executor, through guarded().
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/client_ip.hpp"
#include "gateway/worker.hpp"
#include "upstream/byte_stream.hpp"

namespace sluice {

class ServerTls;
struct ClientCertificate;

using WorkerSocket = WorkerStream::socket_type;

// Starts serving an accepted connection; `socket` must belong to the worker's
// io_context. With `tls` the connection speaks TLS with those contexts.
void start_client_session(Worker& worker, WorkerSocket socket,
                          std::shared_ptr<const ServerTls> tls);

class FrontDoor final : public ClientSession, public std::enable_shared_from_this<FrontDoor> {
 public:
  using Clock = std::chrono::steady_clock;

  // `tls`: the listener's TLS contexts, or null for plain HTTP.
  FrontDoor(Worker& worker, WorkerStream::socket_type socket, std::shared_ptr<const ServerTls> tls);
  ~FrontDoor() override;
  FrontDoor(const FrontDoor&) = delete;
  FrontDoor& operator=(const FrontDoor&) = delete;

  void start();

  // ClientSession, while the connection is still here.
  void on_drain() override;
  void force_close() override;
  std::optional<Clock::time_point> idle_since() const override { return std::nullopt; }
  void on_internal_error(std::string_view what) noexcept;

  // For the sessions it hands the connection to.
  ByteStream& stream() { return stream_; }
  const IpAddress& peer() const { return peer_; }
  const std::string& peer_text() const { return peer_text_; }
  // The client's verified TLS certificate (null: none, or not TLS).
  const ClientCertificate* client_cert() const { return client_cert_.get(); }
  // The connection speaks HTTP/2 from now on, starting with `received` (the
  // bytes read already); `draining`: the worker drains.
  void serve_http2(std::string_view received, bool draining);

 private:
  template <class Fn>
  auto handler(Fn fn) {
    return guarded(shared_from_this(), std::move(fn));
  }

  void start_tls();
  void on_handshake(boost::beast::error_code ec);
  bool alpn_h2();
  void serve_http1();
  void leave();  // no longer the worker's session for the connection
  void close();

  using Timer =
      boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, WorkerExecutor>;

  Worker& worker_;
  ByteStream stream_;
  Timer handshake_timer_;
  IpAddress peer_;
  std::string peer_text_;
  std::shared_ptr<const ClientCertificate> client_cert_;
  // The listener's TLS contexts until the client's first byte makes the
  // connection's TLS state (null on a plain connection, and afterwards).
  std::shared_ptr<const ServerTls> pending_tls_;
  bool registered_ = false;  // the worker's session for the connection
  bool waiting_ = false;     // for the client's first byte
  bool draining_ = false;
  bool closed_ = false;
};

}  // namespace sluice
