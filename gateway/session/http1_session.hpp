// One client connection: it owns its stream, read buffer and request parser,
// and is kept alive only by the handlers that hold it. It reads each request
// head (fresh parser, limits, deadline), admits it, hands it to the middleware
// pipeline and then to its upstream exchange, sends Sluice's own replies,
// loops for keep-alive and closes with a linger. Every handler runs on the
// owning worker's executor, through guarded().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/deadline.hpp"
#include "gateway/session/pipeline.hpp"
#include "gateway/session/request_admission.hpp"
#include "gateway/worker.hpp"
#include "upstream/exchange/upstream_exchange.hpp"

namespace sluice {

class ServerTls;

class Http1Session final : public ClientSession,
                           public MiddlewareLater,
                           public ExchangeHost,
                           public ClientLeg,
                           public std::enable_shared_from_this<Http1Session> {
 public:
  using Clock = std::chrono::steady_clock;

  // `tls`: the listener's TLS contexts, or null for plain HTTP.
  Http1Session(Worker& worker, WorkerStream::socket_type socket,
               std::shared_ptr<const ServerTls> tls);
  ~Http1Session() override;

  // A TLS connection's handshake first (once the client's first byte is
  // readable), then the first request head.
  void start();

  // ClientSession: what the worker asks of a connection.
  void on_drain() override;
  void force_close() override;
  std::optional<Clock::time_point> idle_since() const override { return idle_since_; }

  // An exception on this connection's data path (see common/guarded.hpp):
  // count it once and close this connection; the process goes on serving.
  void on_internal_error(std::string_view what) noexcept override;

  // The deadline of `side` passed (see common/deadline.hpp).
  void on_deadline(Side side);

  // MiddlewareLater: an asynchronous step's completion resumes the pipeline
  // (its outcome is dropped once the connection is closed). A watched step
  // learns of a client that closes its connection meanwhile: the socket is
  // awaited readable and peeked; end of stream or an error means the client
  // is gone (told once, and the exchange abandoned as 499), bytes (a body or
  // a pipelined request) end the watch. The completion ends it too.
  MiddlewareDone take() override;
  void watch_client(std::function<void()> gone) override;

  // ExchangeHost: what the upstream exchange needs of this connection.
  void set_deadline(Side side, Clock::duration timeout) override;
  std::span<char> relay_buffer() override;
  void serialize_request_head(std::string& out, std::string_view upstream_host) override;
  bool draining() const override { return draining_; }
  bool client_closed() const override { return closed_; }
  void awaiting_response(bool waiting) override;
  void count_upstream(const UpstreamConfig& upstream, UpstreamOutcome outcome) override;
  void count_connection(const UpstreamConfig& upstream) override;
  void count_retry() override;
  void exchange_ended(const ExchangeResult& result) override;
  void tunnel_opened() override;
  void tunnel_relayed(TunnelDirection direction, std::size_t n) override;
  void tunnel_ended(bool graceful) override;

  // ClientLeg: the request body read from this connection, the response
  // framed for it (http1_client_leg.cpp).
  bool body_done() const override { return parser_->is_done(); }
  bool body_at_hand() const override { return buffer_.size() > 0; }
  bool expects_continue() const override;
  void send_continue() override;
  void read_body(std::span<char> into) override;
  void start_response(const ResponseStart& start) override;
  void send_response(const char* data, std::size_t n, bool last) override;
  bool keeps_client() const override { return client_keep_alive_; }
  UpgradeStreams upgrade_streams() override { return {&stream_, &buffer_}; }
  std::string upgrade_head() override { return std::move(res_head_); }

 private:
  template <class Fn>
  auto handler(Fn fn) {
    return guarded(shared_from_this(), std::move(fn));
  }

  // The TLS handshake (http1_session.cpp).
  void start_tls();
  // HTTP/2 was chosen by ALPN, or its preface came in place of a request:
  // an Http2Session serves the connection from now on, with `received` (the
  // bytes read already), and this session only keeps the stream for it.
  void become_http2(std::string_view received);
  bool alpn_h2();

  // Reading a request head (http1_session.cpp).
  void set_idle(bool idle);
  void do_read_head();
  void on_first_bytes(boost::beast::error_code ec, std::size_t n);
  void release_buffers();
  void start_head_read();
  void on_head(boost::beast::error_code ec);

  // The middleware and the exchange (http1_session_exchange.cpp).
  void run_middleware();
  void run_pipeline();
  void on_middleware_outcome(std::optional<LocalReply> reply);
  void await_client();
  void on_client_readable(boost::beast::error_code ec, std::uint64_t generation);
  void stop_watching();
  void tell_client_gone();
  void start_upstream();
  // The client's deadline passed during a request body read: the read is
  // cancelled, once, so that the client still gets its 408. False when
  // there was none to cancel (http1_client_leg.cpp).
  bool cancel_stalled_body_read();
  // How an exchange ended (http1_session_exchange.cpp).
  void on_relayed(bool keep_alive);
  void on_upstream_failed(UpstreamError error);
  void on_request_body_failed(boost::beast::error_code ec);
  // Nothing more can be sent: the upstream connection is dropped, the
  // exchange recorded (499 when no status was sent) and the client cut.
  void abort_exchange();
  // Counts and logs the exchange once; `ended` (all but a WebSocket tunnel's
  // opening) runs the steps' end hooks first.
  void record(unsigned status, bool ended = true);

  // Local replies and closing (http1_session.cpp).
  bool keep_open(bool must_close) const;
  void send_local(LocalReply reply, bool close_after);
  void graceful_close();
  void linger();
  void close();
  void end_exchange();  // the pipeline's end hooks, with the status sent
  void reset_exchange();
  std::string new_id();

  using Timer =
      boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, WorkerExecutor>;

  Worker& worker_;
  ByteStream stream_;
  Timer head_timer_;
  Deadline<WorkerExecutor, Side> deadline_;
  bool client_timed_out_ = false;
  boost::beast::flat_buffer buffer_;
  IpAddress peer_;
  std::string peer_text_;
  std::shared_ptr<const Config> config_;

  std::optional<boost::beast::http::request_parser<boost::beast::http::buffer_body>> parser_;
  std::optional<boost::beast::http::response<boost::beast::http::string_body>> local_res_;
  std::unique_ptr<char[]> relay_buffer_;
  Pipeline pipeline_;
  std::function<void()> client_gone_;  // set while a pending step watches the client
  std::uint64_t watch_generation_ = 0;
  bool watch_pending_ = false;  // a readiness wait is on the socket
  bool watching_response_wait_ = false;  // the watch is awaiting_response()'s
  UpstreamExchange exchange_;
  bool closed_ = false;     // the client socket was closed
  bool in_tunnel_ = false;  // between tunnel_opened and tunnel_ended
  // The listener's TLS contexts until the client's first byte makes the
  // connection's TLS state (null on a plain connection, and afterwards).
  std::shared_ptr<const ServerTls> pending_tls_;
  // TLS is up and no error has ended it: a close says close_notify first.
  bool tls_open_ = false;
  bool handed_over_ = false;  // to an Http2Session

  RequestInfo info_;  // the current request, as admitted
  HeaderList response_headers_;
  std::string client_ip_text_;  // set for a route with header rules only
  HeaderVars header_vars_;      // what those rules' values use
  Clock::time_point started_{Clock::now()};

  std::uint64_t requests_ = 0;
  std::uint64_t head_generation_ = 0;
  std::size_t linger_bytes_ = 0;
  unsigned local_status_ = 0;
  bool head_timed_out_ = false;
  bool idle_ = false;
  bool draining_ = false;
  KeepAliveFacts keep_alive_;  // what the current exchange knows of keep-alive
  bool recorded_ = false;
  bool internal_error_ = false;
  std::optional<Clock::time_point> idle_since_;  // waiting for a kept-alive request
  ChunkExtensionLimit chunk_extension_limit_;

  // The response as this connection frames it (http1_client_leg.cpp).
  std::string res_head_;  // its capacity is reused
  ChunkPrefix chunk_prefix_;
  PieceBuffers out_buffers_;  // one write in flight at a time
  bool res_head_pending_ = false;
  bool res_chunked_ = false;
  bool client_keep_alive_ = false;
  bool reading_body_ = false;  // a request body read is in flight
  bool body_timeout_backstop_ = false;
};

}  // namespace sluice
