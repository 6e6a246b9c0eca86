#include "gateway/session/http1_session.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include <spdlog/spdlog.h>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "gateway/metrics.hpp"
#include "gateway/session/client_read_error.hpp"
#include "gateway/front_door.hpp"
#include "gateway/session/local_reply.hpp"
#include "gateway/session/linger.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kLingerMaxBytes = 1024 * 1024;
// What an idle keep-alive connection reads the next request's first bytes
// into (most heads fit): the read buffer it keeps while idle.
constexpr std::size_t kIdleReadBytes = 1024;

// After a timeout cancelled a read, the socket is closed this long later if
// the read did not end (see on_deadline).
constexpr auto kTimeoutBackstop = std::chrono::seconds(1);

// Bytes a closing connection still sends are read into this and dropped.
char* discard_buffer() {
  thread_local std::array<char, 4096> buffer;
  return buffer.data();
}

}  // namespace

Http1Session::Http1Session(Worker& worker, std::shared_ptr<FrontDoor> door)
    : worker_(worker),
      door_(std::move(door)),
      stream_(door_->stream()),
      head_deadline_(stream_.get_executor()),
      deadline_(stream_.get_executor()),
      tls_open_(stream_.is_tls()),
      request_(worker, *this, stream_.get_executor()) {
  request_.set_peer(door_->peer(), door_->peer_text(), door_->client_cert());
  worker_.add_session(this);
}

Http1Session::~Http1Session() {
  set_idle(false);
  if (in_tunnel_) worker_.tunnels_changed(-1);
  if (!handed_over_) worker_.remove_session(this);
}

void Http1Session::start() { do_read_head(); }

// HTTP/2's connection preface came in place of a request line: the front
// door serves the connection as HTTP/2 from now on, with `received`.
void Http1Session::become_http2(std::string_view received) {
  handed_over_ = true;
  idle_ = false;
  deadline_.cancel();
  head_deadline_.cancel();
  worker_.remove_session(this);
  door_->serve_http2(received, draining_);
}

void Http1Session::on_drain() {
  if (handed_over_) return;
  draining_ = true;
  // Only a connection with no byte of a request yet is closed now.
  if (idle_ && buffer_.size() == 0) force_close();
}

void Http1Session::force_close() {
  if (handed_over_) return;
  closed_ = true;
  tls_open_ = false;
  request_.exchange().cancel_wait();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  head_deadline_.cancel();
  deadline_.cancel();
  request_.exchange().close_upstream_socket();
  request_.client_gone();
}

void Http1Session::on_internal_error(std::string_view what) noexcept {
  if (internal_error_) return;
  internal_error_ = true;
  try {
    spdlog::error("client {}: internal error, closing the connection: {}", door_->peer_text(),
                  what);
    worker_.metrics().add("sluice_internal_errors_total", "");
  } catch (...) {
    // Logging failed too; closing is all that is left.
  }
  force_close();
}

// Keep-alive idleness, as the worker sees it (for closing the longest idle
// connections near the connection cap).
void Http1Session::set_idle(bool idle) {
  if (idle == idle_since_.has_value()) return;
  if (idle) {
    idle_since_ = Clock::now();
  } else {
    idle_since_.reset();
  }
  worker_.idle_changed(idle ? 1 : -1);
}

// ---- Reading a request head ----------------------------------------------

void Http1Session::do_read_head() {
  if (draining_) return graceful_close();
  if (buffer_.size() == 0 && requests_ > 0) {
    // Keep-alive: wait until the next request's first byte is readable,
    // under the idle timeout, holding no buffer meanwhile.
    release_buffers();
    idle_ = true;
    set_idle(true);
    set_deadline(Side::kClient, worker_.config()->server.idle_timeout);
    // The last watch's wait, still on the socket, tells when to read.
    if (watch_.pending && !stream_.is_tls()) {
      watch_.next_request = true;
      return;
    }
    return read_first_bytes();
  }
  start_head_read();
}

void Http1Session::read_first_bytes() {
  stream_.async_read_some(buffer_.prepare(std::min(kIdleReadBytes, buffer_.max_size())),
                          handler([](Http1Session& self, beast::error_code ec, std::size_t n) {
                            self.on_first_bytes(ec, n);
                          }));
}

// The kept-alive wait ended (plain TCP only): the first bytes are read now,
// in this turn, as a read that the event completed would have been (an
// operation started here would complete a turn later, and its request would
// miss this turn's batch of decisions). A wake with nothing to read reads
// as before; an error or the end of the stream closes the connection.
void Http1Session::on_next_request_readable(beast::error_code ec) {
  if (ec || closed_) return on_first_bytes(ec ? ec : asio::error::operation_aborted, 0);
  const auto into = buffer_.prepare(std::min(kIdleReadBytes, buffer_.max_size()));
  iovec piece{into.data(), into.size()};
  msghdr message{};
  message.msg_iov = &piece;
  message.msg_iovlen = 1;
  const ssize_t n = ::recvmsg(stream_.socket().native_handle(), &message, MSG_DONTWAIT);
  if (n > 0) return on_first_bytes({}, static_cast<std::size_t>(n));
  if (n == 0) return on_first_bytes(asio::error::eof, 0);
  const int error = errno;
  if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR) return read_first_bytes();
  on_first_bytes(beast::error_code(error, boost::system::system_category()), 0);
}

void Http1Session::on_first_bytes(beast::error_code ec, std::size_t n) {
  idle_ = false;
  set_idle(false);
  if (ec) return close();  // idle timeout or the client went away: close quietly
  buffer_.commit(n);
  start_head_read();
}

// An idle connection keeps little beyond the session itself: the relay
// buffer goes back to the worker, the parsers are freed, and a read buffer
// that a large request grew is given back.
void Http1Session::release_buffers() {
  request_.release_relay_buffer();
  if (buffer_.size() == 0 && buffer_.capacity() > 2 * kIdleReadBytes) buffer_.shrink_to_fit();
  parser_.reset();
  request_.exchange().reset();
}

void Http1Session::start_head_read() {
  // Each request is served by the config current when it starts, even on a
  // connection that was idle across a reload.
  request_.set_config(worker_.config());
  const ServerConfig& server = request_.config().server;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(server.max_header_bytes));
  parser_->body_limit(server.max_body_bytes);
  parser_->on_chunk_header(chunk_extension_limit_);
  // Whatever the parser must hold at once (the head, a chunk-size line, the
  // trailer section) fits within max_header_bytes or the request is refused:
  // one connection cannot grow the buffer without bound.
  buffer_.max_size(std::max(server.max_header_bytes, buffer_.size()));
  idle_ = buffer_.size() == 0;  // nothing of a request yet: a drain may close it
  deadline_.clear();
  head_timed_out_ = false;
  head_deadline_.expires_after(HeadWait::kHead, server.header_timeout, *this);
  http::async_read_header(
      stream_, buffer_, *parser_,
      handler([](Http1Session& self, beast::error_code ec, std::size_t) { self.on_head(ec); }));
}

void Http1Session::on_head(beast::error_code ec) {
  idle_ = false;
  head_deadline_.clear();
  request_.start();
  if (head_timed_out_) {
    return send_local(
        make_local_reply(408, "request head not received in time", request_.new_request_id()),
        true);
  }
  if (ec == http::error::bad_version && requests_ == 0 && request_.config().server.http2.enabled &&
      !stream_.is_tls()) {
    // The HTTP/2 connection preface (h2c with prior knowledge) reads as a
    // request line of version 2.0: nothing of it was consumed.
    const auto data = buffer_.data();
    const std::string_view received{static_cast<const char*>(data.data()), data.size()};
    if (received.starts_with("PRI * HTTP/2.0\r\n")) return become_http2(received);
  }
  if (ec) {
    const ClientReadError error = client_read_error(ec, ReadPhase::kHead);
    if (error.status == 0) return close();
    return send_local(make_local_reply(error.status, error.message, request_.new_request_id()),
                      true);
  }
  ++requests_;
  auto& req = parser_->get();
  request_.set_head(&req);
  RequestInfo& info = request_.info();
  auto refusal = admit_request(req, {parser_->chunked(), parser_->is_done()}, door_->peer(),
                               stream_.is_tls(), request_.config(), info);
  keep_alive_ = {.client_asked = info.keep_alive};
  if (refusal) {
    const bool close = refusal->close_connection;
    return send_local(std::move(*refusal), close);
  }
  request_.run();
}

// ---- Deadlines ------------------------------------------------------------
// One lazily re-armed deadline serves every I/O operation of the connection.
// On expiry the socket of that side is closed, failing its pending operation;
// the *_timed_out_ flags tell a timeout from other errors.

void Http1Session::set_deadline(Side side, Clock::duration timeout) {
  if (side == Side::kClient) client_timed_out_ = false;
  deadline_.expires_after(side, timeout, *this);
}

void Http1Session::on_deadline(HeadWait) {
  if (!parser_ || parser_->is_header_done()) return;  // a head that came in time
  head_timed_out_ = true;
  beast::error_code ignored;
  stream_.socket().cancel(ignored);  // for the 408
  // Cancelling misses a read between two of its system calls: then the
  // socket is closed a little later.
  set_deadline(Side::kClient, kTimeoutBackstop);
}

void Http1Session::on_deadline(Side side) {
  if (side == Side::kUpstream) return request_.exchange().on_upstream_deadline();
  client_timed_out_ = true;
  // A stalled request body still gets its 408: the read is cancelled, not the
  // socket closed; a short backstop closes it if the cancel missed the read.
  if (cancel_stalled_body_read()) {
    deadline_.expires_after(Side::kClient, kTimeoutBackstop, *this);
    return;
  }
  beast::error_code ignored;
  stream_.socket().close(ignored);
}

// ---- Local replies and closing --------------------------------------------

// Whether the connection stays open after the response now being sent.
bool Http1Session::keep_open(bool must_close) const {
  auto facts = keep_alive_;
  facts.draining = draining_;
  facts.must_close = must_close;
  return keep_client_alive(facts);
}

void Http1Session::send_local(LocalReply reply, bool close_after) {
  with_trace_id(reply, request_.info().trace_id);
  const bool head_request = parser_ && parser_->get().method() == http::verb::head;
  const bool keep = keep_open(close_after || requests_ == 0);
  serialize_local_head(res_.head, reply,
                       {.request_id = request_.request_id(),
                        .steps = &request_.response_headers(),
                        .content_length = reply.body.size(),
                        .keep_alive = keep,
                        .announce_keep_alive = keep && parser_ && parser_->get().version() == 10});
  res_.head_pending = false;
  local_body_ = head_request ? std::string{} : std::move(reply.body);
  request_.set_local_status(reply.status);
  set_deadline(Side::kClient, request_.config().server.send_timeout);
  const std::array<asio::const_buffer, 2> buffers{asio::buffer(res_.head),
                                                  asio::buffer(local_body_)};
  asio::async_write(stream_, buffers,
                    handler([keep](Http1Session& self, beast::error_code ec, std::size_t) {
                      self.request_.record(self.request_.local_status());
                      std::string().swap(self.local_body_);  // nothing held while idle
                      self.reset_exchange();
                      if (ec) return self.close();
                      if (!keep) return self.graceful_close();
                      self.do_read_head();
                    }));
}

// Half-close and drain what the client still sends, so that it reads our
// reply rather than a reset (like nginx's lingering close). A TLS connection
// says close_notify first, so that a client reading to the end of the stream
// knows it was not cut short; its close_notify or its end ends the wait. A
// client still sending (OpenSSL refuses data after close_notify) gets the
// plain linger on the socket.
void Http1Session::graceful_close() {
  if (tls_open_) {
    tls_open_ = false;
    set_deadline(Side::kClient, kLingerTimeout);
    stream_.tls().async_shutdown(handler([](Http1Session& self, beast::error_code ec) {
      if (!ec || ByteStream::ended(ec) || self.closed_) return self.close();
      self.graceful_close();
    }));
    return;
  }
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  linger_bytes_ = 0;
  set_deadline(Side::kClient, kLingerTimeout);
  linger();
}

// Reads the socket itself: after a TLS shutdown the bytes are only dropped.
void Http1Session::linger() {
  stream_.socket().async_read_some(
      asio::buffer(discard_buffer(), 4096),
      handler([](Http1Session& self, beast::error_code ec, std::size_t n) {
        self.linger_bytes_ += n;
        if (ec || self.linger_bytes_ > kLingerMaxBytes) return self.close();
        self.linger();
      }));
}

void Http1Session::close() {
  closed_ = true;
  request_.end_pipeline_at_close();
  tls_open_ = false;
  beast::error_code ec;
  stream_.socket().close(ec);
  head_deadline_.cancel();
  deadline_.cancel();
  request_.exchange().cancel_wait();
  request_.client_gone();
}

void Http1Session::reset_exchange() {
  awaiting_response(false);  // an exchange that ended before its response head
  request_.reset();
}

}  // namespace sluice
