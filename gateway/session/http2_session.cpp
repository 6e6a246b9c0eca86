#include "gateway/session/http2_session.hpp"

#include <algorithm>
#include <array>

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "common/soon.hpp"
#include "gateway/metrics.hpp"
#include "gateway/session/http2_stream.hpp"
#include "gateway/session/linger.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;


std::string_view goaway_reason(std::uint32_t code) {
  switch (code) {
    case NGHTTP2_PROTOCOL_ERROR:
      return "protocol_error";
    case NGHTTP2_FLOW_CONTROL_ERROR:
      return "flow_control_error";
    case NGHTTP2_FRAME_SIZE_ERROR:
      return "frame_size_error";
    case NGHTTP2_COMPRESSION_ERROR:
      return "compression_error";
    case NGHTTP2_ENHANCE_YOUR_CALM:
      return "flood";
    case NGHTTP2_STREAM_CLOSED:
      return "stream_closed";  // a frame on a stream the client had ended (DATA after END_STREAM)
    case NGHTTP2_INTERNAL_ERROR:
      return "rapid_reset";  // nghttp2's answer to more RST_STREAM than its rate allows
    default:
      return "other";
  }
}

// A GOAWAY frame written by hand, for when nghttp2 itself has given up on
// the session (a fatal error while receiving).
std::string raw_goaway(std::int32_t last_stream, std::uint32_t code) {
  std::string f(17, '\0');
  f[2] = 8;  // length
  f[3] = 0x7;  // GOAWAY
  for (int i = 0; i < 4; ++i) {
    f[9 + i] = static_cast<char>((static_cast<std::uint32_t>(last_stream) >> (24 - 8 * i)) & 0xff);
    f[13 + i] = static_cast<char>((code >> (24 - 8 * i)) & 0xff);
  }
  return f;
}

}  // namespace

Http2Session::~Http2Session() {
  if (idle_since_) worker_.idle_changed(-1);
  nghttp2_session_del(session_);
  worker_.remove_session(this);
}

void Http2Session::start(std::string_view received) {
  const auto& server = worker_.config()->server;
  read_ahead_budget_ = server.http2.max_read_ahead_bytes;
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, server.http2.max_concurrent_streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(server.max_header_bytes)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
  update_idle();
  if (!received.empty() &&
      !receive({reinterpret_cast<const std::uint8_t*>(received.data()), received.size()})) {
    return;
  }
  flush();
  read();
}

// ---- Reading and writing ----------------------------------------------------

void Http2Session::read() {
  // After nghttp2 gave up on the session (final_goaway_), nothing more is read.
  if (reading_ || closed_ || lingering_ || !final_goaway_.empty() || pump_.full()) return;
  if (nghttp2_session_want_read(session_) == 0) return;
  reading_ = true;
  const auto into = pump_.read_buffer();
  stream_.async_read_some(asio::buffer(into.data(), into.size()),
                          handler([](Http2Session& self, beast::error_code ec, std::size_t n) {
                            self.on_read(ec, n);
                          }));
}

void Http2Session::on_read(beast::error_code ec, std::size_t n) {
  SoonBatch batch(stream_.get_executor());  // what the frames of this read start
  reading_ = false;
  if (closed_) return;
  if (lingering_) return ec ? close() : linger();
  if (ec) return close();  // the client went (or the idle timeout closed it)
  if (!receive(pump_.read_buffer().first(n))) return;
  flush();
  read();
  batch.run();  // it goes now (soon.hpp)
}

bool Http2Session::receive(std::span<const std::uint8_t> bytes) {
  if (!final_goaway_.empty()) return false;  // given up on already: its GOAWAY is going
  const ssize_t rv = pump_.receive(session_, bytes);
  if (rv >= 0) return true;
  // nghttp2 gave up on the session: it is told why with a GOAWAY of our own.
  std::string_view reason = "protocol_error";
  std::uint32_t code = NGHTTP2_PROTOCOL_ERROR;
  if (rv == NGHTTP2_ERR_FLOODED) {
    reason = "flood";
    code = NGHTTP2_ENHANCE_YOUR_CALM;
  } else if (rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) {
    reason = "continuation_flood";
    code = NGHTTP2_ENHANCE_YOUR_CALM;
  } else if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
    reason = "bad_preface";
  } else if (rv == NGHTTP2_ERR_CALLBACK_FAILURE) {
    reason = "internal_error";
    code = NGHTTP2_INTERNAL_ERROR;
  }
  spdlog::debug("client {}: HTTP/2 connection ended: {}", peer_text_, nghttp2_strerror(rv));
  worker_.metrics().add("sluice_http2_goaways_total", label("reason", reason));
  goaway_counted_ = true;
  final_goaway_ = raw_goaway(nghttp2_session_get_last_proc_stream_id(session_), code);
  if (!pump_.writing()) write_final_goaway();
  return false;
}

// The last frame of a connection nghttp2 gave up on, written after whatever
// write is in flight; then the close.
void Http2Session::write_final_goaway() {
  arm_write_timer(pump_.start_write());
  asio::async_write(stream_, asio::buffer(final_goaway_),
                    handler([](Http2Session& self, beast::error_code ec, std::size_t) {
                      self.pump_.write_done();
                      if (ec) return self.close();
                      self.graceful_close();
                    }));
}

void Http2Session::flush() {
  // Inside nghttp2's callbacks nothing is sent: receive()'s caller flushes.
  if (!pump_.can_send() || closed_ || !final_goaway_.empty()) return;
  for (;;) {
    if (const int rv = pump_.gather(session_); rv < 0) {
      spdlog::warn("client {}: HTTP/2 send failed: {}", peer_text_, nghttp2_strerror(rv));
      return close();
    }
    const std::string& out = pump_.pending();
    if (out.empty()) {
      // Nothing more to say and nothing more to hear (GOAWAY both ways, or a
      // drain with every stream done): the connection is over.
      if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
        return graceful_close();
      }
      if (draining_ && streams_.empty()) return graceful_close();
      return;
    }
    // What the socket takes at once is written now (no completion to wait
    // for, no pass of the event loop); the rest goes asynchronously.
    beast::error_code ec;
    const std::size_t n = stream_.write_now(asio::buffer(out), ec);
    if (!ByteStream::would_block(ec)) {
      pump_.write_done();
      return close();
    }
    if (n < out.size()) {
      arm_write_timer(pump_.start_write());
      asio::async_write(stream_, asio::buffer(out.data() + n, out.size() - n),
                        handler([](Http2Session& self, beast::error_code ec, std::size_t) {
                          self.on_written(ec);
                        }));
      return;
    }
    pump_.write_done();
    read();  // a full queue may have paused reading
  }
}

// A client that takes no byte for send_timeout is closed: its connection
// would otherwise hold what is queued for it forever.
void Http2Session::arm_write_timer(std::uint64_t generation) {
  write_timer_.expires_after(worker_.config()->server.send_timeout);
  write_timer_.async_wait(handler([generation](Http2Session& self, beast::error_code ec) {
    if (ec || !self.pump_.stalled(generation)) return;
    spdlog::debug("client {}: HTTP/2 connection not reading, closing", self.peer_text_);
    self.close();
  }));
}

void Http2Session::request_flush() {
  if (flush_posted_ || closed_) return;
  flush_posted_ = true;
  post_last(stream_.get_executor(), handler([](Http2Session& self) {
               self.flush_posted_ = false;
               self.flush();
               self.read();
             }));
}

void Http2Session::on_written(beast::error_code ec) {
  pump_.write_done();
  write_timer_.cancel();
  if (closed_) return;
  if (ec) return close();
  if (!final_goaway_.empty()) return write_final_goaway();
  flush();
  read();
}

// ---- Ending -------------------------------------------------------------------

void Http2Session::goaway(std::uint32_t code, std::string_view reason) {
  if (!goaway_counted_) {
    goaway_counted_ = true;
    worker_.metrics().add("sluice_http2_goaways_total", label("reason", reason));
  }
  nghttp2_session_terminate_session(session_, code);
}

void Http2Session::count_goaway(std::uint32_t code) {
  if (goaway_counted_ || code == NGHTTP2_NO_ERROR) return;
  goaway_counted_ = true;
  worker_.metrics().add("sluice_http2_goaways_total", label("reason", goaway_reason(code)));
}

void Http2Session::header_timeout() {
  spdlog::debug("client {}: HTTP/2 header block not finished in time, closing", peer_text_);
  goaway(NGHTTP2_NO_ERROR, "header_timeout");
  flush();
}

void Http2Session::header_list_abuse() {
  spdlog::warn("client {}: HTTP/2 header list far over max_header_bytes, closing", peer_text_);
  goaway(NGHTTP2_ENHANCE_YOUR_CALM, "header_flood");
}

// A drain: GOAWAY (the streams already begun finish), then the close once
// they are done.
void Http2Session::on_drain() {
  if (draining_ || closed_) return;
  draining_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  flush();
}

// The last frame went: the sending side ends, and what the client still
// sends is read and dropped for a moment, so that a client still sending
// reads the GOAWAY rather than a reset (nginx's lingering close).
void Http2Session::graceful_close() {
  if (closed_ || lingering_) return;
  lingering_ = true;
  stream_.shutdown_send();
  write_timer_.expires_after(kLingerTimeout);
  write_timer_.async_wait(handler([](Http2Session& self, beast::error_code ec) {
    if (!ec) self.close();
  }));
  if (!reading_) linger();
}

void Http2Session::linger() {
  reading_ = true;
  const auto into = pump_.read_buffer();
  stream_.socket().async_read_some(
      asio::buffer(into.data(), into.size()),
      handler([](Http2Session& self, beast::error_code ec, std::size_t) {
        self.reading_ = false;
        if (ec || self.closed_) return self.close();
        self.linger();
      }));
}

void Http2Session::force_close() {
  close();
}

void Http2Session::on_internal_error(std::string_view what) noexcept {
  if (internal_error_) return;
  internal_error_ = true;
  try {
    spdlog::error("client {}: internal error, closing the HTTP/2 connection: {}", peer_text_, what);
    worker_.metrics().add("sluice_internal_errors_total", "");
  } catch (...) {
  }
  close();
}

void Http2Session::close() {
  if (closed_) return;
  closed_ = true;
  idle_wait_.clear_deadline();
  write_timer_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  // Every stream still open ends with the connection.
  auto streams = streams_.take_all();
  for (auto& [id, s] : streams) s->on_closed(NGHTTP2_CANCEL);
  deadlines_.stop_if_idle();  // unless a stream's exchange goes on without its client
  if (idle_since_) {
    idle_since_.reset();
    worker_.idle_changed(-1);
  }
}

// No stream open: the connection is idle (for the worker's shedding, and for
// idle_timeout).
//
// The wait is a deadline on the connection's sweep: a stream that opens
// clears it and the last one to end sets it again, touching the timer only
// when nothing earlier is waited for.
void Http2Session::update_idle() {
  const bool idle = streams_.empty() && !closed_;
  if (idle == idle_since_.has_value()) return;
  if (!idle) {
    idle_since_.reset();
    worker_.idle_changed(-1);
    idle_wait_.clear_deadline();
    return;
  }
  idle_since_ = Clock::now();
  worker_.idle_changed(1);
  deadlines_.expires_after(idle_wait_, worker_.config()->server.idle_timeout, *this);
}

void Http2Session::idle_timed_out() {
  if (closed_ || !idle_since_) return;
  // A reload may have made the timeout longer since: the rest is waited for.
  const auto timeout = worker_.config()->server.idle_timeout;
  const auto idle_for = Clock::now() - *idle_since_;
  if (idle_for < timeout) return deadlines_.expires_after(idle_wait_, timeout - idle_for, *this);
  // Idle too long: GOAWAY, then the close.
  draining_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  flush();
}

}  // namespace sluice
