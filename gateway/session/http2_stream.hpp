// One HTTP/2 stream of an Http2Session: a request as its HEADERS carried it,
// admitted, then handed to its request object (proxied_request.hpp: routed,
// limited, proxied and recorded as an HTTP/1.1 request is), to which it is
// the client leg: DATA frames are its request body, credited back to the client
// only as the exchange takes them; the response goes out as HEADERS, DATA
// (as the client's windows allow: a piece is done once nghttp2 has framed
// it) and END_STREAM. Sluice's own replies to gRPC calls are gRPC replies
// (grpc_reply.hpp). Recorded and logged like an HTTP/1.1 exchange.
//
// Owned by its session while the stream is open; its handlers hold it (and
// through it the session) alive. Every handler runs on the worker's executor.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/message.hpp>

#include "common/deadline_sweep.hpp"
#include "gateway/session/http2_request_head.hpp"
#include "gateway/session/proxied_request.hpp"
#include "upstream/h2/h2_header_block.hpp"
#include "upstream/http_fields.hpp"

namespace sluice {

class Http2Session;

class Http2Stream final : public RequestLeg,
                          public SweptDeadline,
                          public std::enable_shared_from_this<Http2Stream> {
 public:
  using Clock = std::chrono::steady_clock;

  Http2Stream(Http2Session& session, std::shared_ptr<Http2Session> owner, std::int32_t id);
  ~Http2Stream() override;

  // ---- From the session (nghttp2's callbacks) ----
  // The header block has server.header_timeout to end.
  void start_head_timer();
  // A header field of the request head, or of its trailers (kept for an
  // HTTP/2 upstream); false when
  // the list has grown many times past max_header_bytes (an HPACK bomb).
  bool on_header(std::string_view name, std::string_view value);
  // The request head is whole (`end_stream`: no body follows).
  void on_headers_done(bool end_stream);
  bool headers_done() const { return head_.done(); }
  // DATA payload; the END_STREAM flag.
  void on_data(const std::uint8_t* data, std::size_t n);
  void on_end_stream();
  // The stream closed (its response went, or it was reset: `error_code`).
  void on_closed(std::uint32_t error_code);
  // nghttp2 asks for response body bytes (its data source).
  long read_response(std::uint8_t* buf, std::size_t length, std::uint32_t* flags);
  // A frame ending the response went: a request still being sent is cut.
  bool response_complete() const { return response_done_; }
  bool request_complete() const { return end_stream_; }
  void set_response_done() { response_done_ = true; }

  // RequestLeg: what the request object needs of this stream.
  std::shared_ptr<void> keep_alive() override { return shared_from_this(); }
  std::string_view protocol() const override { return "HTTP/2"; }
  bool closed() const override { return closed_; }
  bool draining() const override;
  void set_deadline(Side side, Clock::duration timeout) override;
  // Sluice's own reply: to a gRPC call a Trailers-Only gRPC reply, else the
  // status with the JSON body (a stream carries no other request after it).
  void send_local(LocalReply reply, bool close_after) override;
  void relayed(bool) override {}
  void cut(CutReason reason) override;
  bool body_timed_out(boost::beast::error_code ec) const override;
  std::optional<std::uint64_t> declared_length() const override;
  void flush() override;
  void exchange_ending() override;
  std::size_t read_ahead_room() const override { return session_.read_ahead_room(read_ahead_); }
  void read_ahead_used(std::size_t n) override {
    read_ahead_ += n;
    session_.read_ahead_add(n);
  }
  void read_ahead_released() override {
    session_.read_ahead_remove(read_ahead_);
    read_ahead_ = 0;
  }
  void exchange_finished() override;
  void awaiting_response(bool waiting) override { awaiting_response_ = waiting; }
  void on_internal_error(std::string_view what) noexcept override;

  // ClientLeg
  bool body_done() const override { return body_complete_; }
  bool body_at_hand() const override { return !body_.empty(); }
  bool expects_continue() const override;
  void send_continue() override;
  void read_body(std::span<char> into) override;
  void cancel_read() override;
  const HttpFields* request_trailers() const override {
    return head_.trailers();
  }
  bool full_duplex() const override { return true; }
  void start_response(const ResponseStart& start) override;
  void set_response_trailers(const HttpFields& trailers) override;
  void send_response(const char* data, std::size_t n, bool last) override;
  bool keeps_client() const override { return true; }

  void on_deadline(Side side);

 private:
  // The stream's one deadline passed (its session's sweep).
  void deadline_passed() noexcept override;

  template <class Fn>
  auto handler(Fn fn) {
    return guarded(shared_from_this(), std::move(fn));
  }

  // Hands buffered body bytes to a pending read.
  void fill_read();
  // Submits the response head (the thread's block, built just before);
  // `body`: a DATA source follows.
  void submit_head(unsigned status, H2HeaderBlock& block, bool body);
  void reset(std::uint32_t code);
  UpstreamExchange& exchange() { return request_.exchange(); }

  Http2Session& session_;
  std::shared_ptr<Http2Session> owner_;  // the session lives while a handler holds this
  std::size_t read_ahead_ = 0;  // body bytes read ahead, in the session's budget until the end
  std::int32_t id_;

  Http2RequestHead head_;  // the request as HEADERS carried it, in HTTP/1.1 terms

  // The request body: received, not yet taken by the exchange.
  std::string body_;
  std::uint64_t body_received_ = 0;
  std::optional<std::span<char>> pending_read_;
  bool end_stream_ = false;     // END_STREAM came
  bool body_complete_ = false;  // and the exchange has read the body to its end
  bool body_too_large_ = false;

  // The response.
  Side deadline_side_ = Side::kClient;  // whose wait the deadline (SweptDeadline) guards
  H2HeaderBlock response_trailers_;
  const char* piece_ = nullptr;  // the piece nghttp2 is framing
  std::size_t piece_left_ = 0;
  bool piece_pending_ = false;  // send_response waits for nghttp2
  bool piece_last_ = false;
  bool head_submitted_ = false;
  bool response_done_ = false;
  std::string local_body_;  // a local reply's body, as nghttp2 takes it
  bool awaiting_response_ = false;  // the whole request went upstream, no head yet
  bool closed_ = false;  // reset, or the connection went

  ProxiedRequest request_;  // declared last: it goes first
};

}  // namespace sluice
