// One HTTP/1.1 client connection: it owns its stream, read buffer and request
// parser, and is kept alive only by the handlers that hold it. It reads each
// request head (fresh parser, limits, deadline), admits it and hands it to
// its request object (proxied_request.hpp), to which it is the client leg:
// the body is read and the response framed here, Sluice's own replies sent;
// it loops for keep-alive and closes with a linger. Every handler runs on the
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

#include "common/deadline.hpp"
#include "gateway/session/proxied_request.hpp"
#include "gateway/session/request_admission.hpp"
#include "gateway/worker.hpp"
#include "upstream/http_fields.hpp"

namespace sluice {

class FrontDoor;

class Http1Session final : public ClientSession,
                           public RequestLeg,
                           public std::enable_shared_from_this<Http1Session> {
 public:
  using Clock = std::chrono::steady_clock;

  // The connection `door` holds (its TLS handshake done, if any).
  Http1Session(Worker& worker, std::shared_ptr<FrontDoor> door);
  ~Http1Session() override;

  // Reads the first request head.
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
  // The wait for a request head outlasted server.header_timeout.
  enum class HeadWait : std::uint8_t { kHead };
  void on_deadline(HeadWait);

  // RequestLeg: what the request object needs of this connection
  // (http1_session_exchange.cpp). A watched middleware step learns of a
  // client that closes its connection meanwhile: the socket is awaited
  // readable and peeked; end of stream or an error means the client is gone
  // (told once, and the exchange abandoned as 499), bytes (a body or a
  // pipelined request) end the watch. The completion ends it too.
  std::shared_ptr<void> keep_alive() override { return shared_from_this(); }
  std::string_view protocol() const override;
  bool closed() const override { return closed_; }
  bool draining() const override { return draining_; }
  void set_deadline(Side side, Clock::duration timeout) override;
  void send_local(LocalReply reply, bool close_after) override;
  void relayed(bool keep_alive) override;
  void cut(CutReason reason) override;
  bool body_timed_out(boost::beast::error_code ec) const override;
  std::optional<std::uint64_t> declared_length() const override;
  void watch() override { await_client(); }
  void unwatch() override { stop_watching(); }
  void awaiting_response(bool waiting) override;
  void body_read_ahead() override { deadline_.clear(); }
  void tunnel_opened() override;
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
  bool keeps_client() const override { return res_.keep_alive; }
  UpgradeStreams upgrade_streams() override { return {&stream_, &buffer_}; }
  std::string upgrade_head() override { return std::move(res_.head); }

 private:
  template <class Fn>
  auto handler(Fn fn) {
    return guarded(shared_from_this(), std::move(fn));
  }

  // HTTP/2's preface came in place of a request: the front door hands the
  // connection to an Http2Session, with `received` (the bytes read already).
  void become_http2(std::string_view received);

  // Reading a request head (http1_session.cpp).
  void set_idle(bool idle);
  void do_read_head();
  void read_first_bytes();
  void on_next_request_readable(boost::beast::error_code ec);
  void on_first_bytes(boost::beast::error_code ec, std::size_t n);
  void release_buffers();
  void start_head_read();
  void on_head(boost::beast::error_code ec);

  // Watching the client while a step is pending (http1_session_exchange.cpp).
  void await_client();
  void on_client_readable(boost::beast::error_code ec, std::uint64_t wait_id);
  void stop_watching();
  // The client's deadline passed during a request body read: the read is
  // cancelled, once, so that the client still gets its 408. False when
  // there was none to cancel (http1_client_leg.cpp).
  bool cancel_stalled_body_read();

  // Local replies and closing (http1_session.cpp).
  bool keep_open(bool must_close) const;
  void graceful_close();
  void linger();
  void close();
  void reset_exchange();

  Worker& worker_;
  std::shared_ptr<FrontDoor> door_;  // owns the stream
  ByteStream& stream_;
  // The head's deadline, moved at each request without a system call (its
  // timer is re-armed only when it fires before the deadline).
  Deadline<WorkerExecutor, HeadWait> head_deadline_;
  Deadline<WorkerExecutor, Side> deadline_;
  bool client_timed_out_ = false;
  boost::beast::flat_buffer buffer_;

  std::optional<boost::beast::http::request_parser<boost::beast::http::buffer_body, FieldAllocator<char>>> parser_;
  std::string local_body_;  // a local reply's body while it is written (its head: res_.head)
  // Watching the client while a step is pending or the response awaited.
  // On plain TCP a watch that ends leaves its wait on the socket: the next
  // watch, or the kept-alive wait for the next request, takes it over (one
  // system call less per request than a new wait or read).
  struct Watch {
    std::uint64_t generation = 0;       // the current watch's
    std::uint64_t wait_generation = 0;  // the watch the pending wait answers
    std::uint64_t wait_id = 0;          // the pending wait's (a cancelled one's is older)
    bool pending = false;               // a readiness wait is on the socket
    bool response_wait = false;         // the watch is awaiting_response()'s
    bool next_request = false;          // the pending wait is the kept-alive one
    // A watch is on: its wait, pending, answers it (not an ended watch's).
    bool watching() const { return pending && wait_generation == generation; }
  } watch_;
  bool closed_ = false;     // the client socket was closed
  bool in_tunnel_ = false;  // between tunnel_opened and tunnel_ended
  // TLS is up and no error has ended it: a close says close_notify first.
  bool tls_open_ = false;
  bool handed_over_ = false;  // to an Http2Session

  std::uint64_t requests_ = 0;
  std::size_t linger_bytes_ = 0;
  bool head_timed_out_ = false;
  bool idle_ = false;
  bool draining_ = false;
  KeepAliveFacts keep_alive_;  // what the current exchange knows of keep-alive
  bool internal_error_ = false;
  std::optional<Clock::time_point> idle_since_;  // waiting for a kept-alive request
  ChunkExtensionLimit chunk_extension_limit_;

  // The response as this connection frames it (http1_client_leg.cpp).
  struct Framing {
    std::string head;  // its capacity is reused
    ChunkPrefix chunk_prefix;
    PieceBuffers out_buffers;  // one write in flight at a time
    bool head_pending = false;
    bool chunked = false;
    bool keep_alive = false;  // the connection stays open after the response
  } res_;
  // A request body read is in flight; its timeout's backstop is armed.
  struct BodyRead {
    bool in_flight = false;
    bool backstop = false;
  } body_read_;

  // The current request (declared last: it goes first, while the stream it
  // may still hold operations on lives).
  ProxiedRequest request_;
};

}  // namespace sluice
