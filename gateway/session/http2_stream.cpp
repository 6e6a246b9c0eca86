#include "gateway/session/http2_stream.hpp"

#include <algorithm>
#include <cstring>

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "common/ascii.hpp"
#include "common/soon.hpp"
#include "gateway/session/client_read_error.hpp"
#include "gateway/session/http2_session.hpp"
#include "gateway/session/local_reply.hpp"
#include "gateway/session/request_path.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

}  // namespace

Http2Stream::Http2Stream(Http2Session& session, std::shared_ptr<Http2Session> owner,
                         std::int32_t id)
    : session_(session),
      owner_(std::move(owner)),
      id_(id),
      request_(session.worker(), *this, session.executor()) {
  head_.request().version(11);
  request_.set_peer(session.peer(), session.peer_text(), session.client_cert());
}

// (owner_ keeps the session alive through this.)
Http2Stream::~Http2Stream() {
  session_.read_ahead_remove(read_ahead_);
  // The last stream of a closed session (one whose exchange went on without
  // its client) stops the session's timer.
  clear_deadline();
  if (session_.closed()) session_.deadlines().stop_if_idle();
}

// ---- The request head -------------------------------------------------------

void Http2Stream::start_head_timer() {
  set_deadline(Side::kClient, request_.config().server.header_timeout);
}

bool Http2Stream::on_header(std::string_view name, std::string_view value) {
  return head_.add(name, value, request_.config().server.max_header_bytes, request_.info().route);
}

void Http2Stream::on_headers_done(bool end_stream) {
  clear_deadline();
  head_.finish();
  end_stream_ = end_stream;
  body_complete_ = end_stream;
  request_.set_config(session_.worker().config());
  request_.start();
  RequestInfo& info = request_.info();
  info.client_ip = session_.peer();
  ClientRequest& req = head_.request();
  request_.set_head(&req);
  const Config& config = request_.config();
  if (head_.too_large()) {
    return send_local(make_local_reply(431, "request header fields too large",
                                       generate_request_id()),
                      true);
  }
  const auto content_length = head_.content_length();
  if (content_length && *content_length > config.server.max_body_bytes) {
    return send_local(make_local_reply(413, "request body too large", generate_request_id()),
                      true);
  }
  BodyFacts body;
  body.done = end_stream;
  // A body of unknown length goes to an HTTP/1.1 upstream chunked.
  body.chunked = !end_stream && !content_length;
  auto refusal = admit_request(req, body, session_.peer(), session_.over_tls(), config, info);
  if (refusal) return send_local(std::move(*refusal), true);
  request_.run();
}

// ---- The request object's leg --------------------------------------------------

std::optional<std::uint64_t> Http2Stream::declared_length() const {
  // A request without a body but of a method that may have one still says so.
  std::optional<std::uint64_t> length = head_.content_length();
  if (!length && request_.info().body.done && head_.request().method() != http::verb::get &&
      head_.request().method() != http::verb::head) {
    length = 0;
  }
  return length;
}

bool Http2Stream::draining() const { return session_.draining(); }

void Http2Stream::flush() { session_.request_flush(); }

// The exchange's buffers are no longer lent to this stream: a body read or a
// response piece still pending is dropped (DATA that arrives now is not
// copied into a relay buffer about to go back to the worker). A local reply
// lends its own.
void Http2Stream::exchange_ending() {
  pending_read_.reset();
  piece_pending_ = false;
  piece_ = nullptr;
  piece_left_ = 0;
}

// Recorded: the relay buffer goes back to the worker for the next stream now,
// not when this stream's last handler has gone.
void Http2Stream::exchange_finished() {
  exchange().reset();
  request_.release_relay_buffer();
  session_.request_flush();
}

bool Http2Stream::body_timed_out(beast::error_code ec) const {
  return ec == beast::error::timeout;
}

void Http2Stream::cut(CutReason reason) {
  reset(reason == CutReason::kCancel ? NGHTTP2_CANCEL : NGHTTP2_INTERNAL_ERROR);
}

void Http2Stream::on_internal_error(std::string_view what) noexcept {
  session_.on_internal_error(what);
}

void Http2Stream::set_deadline(Side side, Clock::duration timeout) {
  deadline_side_ = side;
  session_.deadlines().expires_after(*this, timeout, session_);
}

void Http2Stream::deadline_passed() noexcept {
  const auto self = shared_from_this();
  call_guarded(*this, false, [this] {
    on_deadline(deadline_side_);
    return true;
  });
}

void Http2Stream::on_deadline(Side side) {
  if (side == Side::kUpstream) return exchange().on_upstream_deadline();
  if (!head_.done()) {
    // A header block left unfinished: nothing else may come on the
    // connection until it ends, so the connection goes.
    return session_.header_timeout();
  }
  // The client sent no body byte, or took no response byte, in time.
  if (pending_read_) {
    pending_read_.reset();
    post_soon(session_.executor(), handler([](Http2Stream& self) {
                 self.exchange().on_body_read(beast::error::timeout, 0);
               }));
    return;
  }
  if (piece_pending_) {
    piece_pending_ = false;
    reset(NGHTTP2_CANCEL);
    if (request_.in_exchange()) {
      post_soon(session_.executor(), handler([](Http2Stream& self) {
                   self.exchange().on_response_sent(beast::error::timeout);
                 }));
    }
    session_.request_flush();
  }
}

// ---- The request body (the exchange's source) -----------------------------------

void Http2Stream::on_data(const std::uint8_t* data, std::size_t n) {
  body_received_ += n;
  if (body_too_large_ || body_received_ > request_.config().server.max_body_bytes) {
    body_too_large_ = true;  // dropped (the connection's window had it back)
  } else {
    body_.append(reinterpret_cast<const char*>(data), n);
  }
  fill_read();
}

void Http2Stream::on_end_stream() {
  end_stream_ = true;
  fill_read();
}

void Http2Stream::read_body(std::span<char> into) {
  if (closed_) {
    post_soon(session_.executor(), handler([](Http2Stream& self) {
                 self.exchange().on_body_read(asio::error::operation_aborted, 0);
               }));
    return;
  }
  pending_read_ = into;
  fill_read();
  if (pending_read_) set_deadline(Side::kClient, request_.config().server.body_timeout);
}

void Http2Stream::cancel_read() {
  if (!pending_read_) return;
  pending_read_.reset();
  post_soon(session_.executor(), handler([](Http2Stream& self) {
               self.exchange().on_body_read(asio::error::operation_aborted, 0);
             }));
}

void Http2Stream::fill_read() {
  if (!pending_read_) return;
  if (body_too_large_) {
    pending_read_.reset();
    post_soon(session_.executor(), handler([](Http2Stream& self) {
                 self.exchange().on_body_read(http::error::body_limit, 0);
               }));
    return;
  }
  if (body_.empty() && !end_stream_) return;  // waits for DATA
  const std::size_t n = std::min(pending_read_->size(), body_.size());
  std::memcpy(pending_read_->data(), body_.data(), n);
  body_.erase(0, n);
  pending_read_.reset();
  // The exchange learns of the body's end with the read that hands out its
  // last byte (or none), never between two of its reads.
  if (body_.empty() && end_stream_) body_complete_ = true;
  // The stream's window credited back now that the upstream takes them.
  if (n > 0 && !closed_) nghttp2_session_consume_stream(session_.nghttp2(), id_, n);
  post_soon(session_.executor(), handler([n](Http2Stream& self) {
               // END_STREAM read with the DATA (nghttp2 tells of it after the
               // DATA's bytes): this read is the last, and the upstream gets
               // the END_STREAM with them.
               if (self.body_.empty() && self.end_stream_ && !self.closed_ &&
                   !self.body_too_large_) {
                 self.body_complete_ = true;
               }
               self.exchange().on_body_read({}, n);
               self.session_.request_flush();
             }));
}

void Http2Stream::reset(std::uint32_t code) {
  if (closed_ || response_done_) return;
  nghttp2_submit_rst_stream(session_.nghttp2(), NGHTTP2_FLAG_NONE, id_, code);
}

// ---- The end ----------------------------------------------------------------------

void Http2Stream::on_closed(std::uint32_t error_code) {
  if (closed_) return;
  closed_ = true;
  const RequestInfo& info = request_.info();
  const bool in_exchange = request_.in_exchange();
  if (in_exchange && awaiting_response_ && info.route && info.route->ignore_client_abort) {
    // The route lets the upstream finish a request whose client left: the
    // exchange goes on under its upstream deadline, and the answer nobody
    // reads ends it (send_response fails it as aborted).
    body_.clear();
    return;
  }
  clear_deadline();
  exchange().cancel_wait();
  body_.clear();  // nobody will read it (the connection's window had it back)
  request_.client_gone();
  if (!in_exchange && pending_read_) {
    // A read ahead of the decision (a route that reads the body) fails.
    pending_read_.reset();
    post_soon(session_.executor(), handler([](Http2Stream& self) {
                 self.exchange().on_body_read(asio::error::operation_aborted, 0);
               }));
  }
  if (in_exchange && response_done_ && error_code == NGHTTP2_NO_ERROR) {
    // The response went whole: the exchange finishes on its own, once a body
    // read still in flight (the request was cut) has ended.
    cancel_read();
    return;
  }
  if (in_exchange) {
    // Reset by the client (or the connection went): what is pending fails
    // and the exchange ends as aborted.
    exchange().close_upstream_socket();
    if (pending_read_) {
      pending_read_.reset();
      post_soon(session_.executor(), handler([](Http2Stream& self) {
                   self.exchange().on_body_read(asio::error::operation_aborted, 0);
                 }));
    }
    if (piece_pending_) {
      piece_pending_ = false;
      post_soon(session_.executor(), handler([](Http2Stream& self) {
                   self.exchange().on_response_sent(asio::error::operation_aborted);
                 }));
    }
    return;
  }
  if (!request_.recorded() && head_.done()) {
    const unsigned local = request_.local_status();
    request_.record(error_code == NGHTTP2_NO_ERROR && local ? local : 499);
  }
}

}  // namespace sluice
