#include "gateway/session/http2_session.hpp"

#include <algorithm>
#include <array>

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "gateway/metrics.hpp"
#include "gateway/session/http2_stream.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

constexpr std::size_t kReadBytes = 16 * 1024;
constexpr auto kLingerTimeout = std::chrono::seconds(2);
// Streams refused beyond max_concurrent_streams before the connection goes.
constexpr std::uint64_t kMaxRefusedStreams = 100;
// The streams Sluice reset lately, whose late frames are no offence.
constexpr std::size_t kRememberedResets = 128;

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
      return "stream_id_reused";
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

// nghttp2's C callbacks, each forwarding to the session (user_data).
struct Http2Callbacks {
  static Http2Session& of(void* user_data) { return *static_cast<Http2Session*>(user_data); }

  // An exception must not unwind through libnghttp2's C frames: it ends the
  // connection (as an internal error) and nghttp2 is told the callback failed.
  template <class Fn>
  static int guard(void* user_data, Fn fn) noexcept {
    Http2Session& session = of(user_data);
    return call_guarded(session, int{NGHTTP2_ERR_CALLBACK_FAILURE},
                        [&]() -> int { return fn(session); });
  }

  static int begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    return guard(user_data, [&](Http2Session& s) { return s.on_begin_headers(frame->hd.stream_id); });
  }
  static int begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user_data) {
    if (hd->type != NGHTTP2_HEADERS) return 0;
    return guard(user_data, [&](Http2Session& s) { return s.on_begin_headers_frame(hd->stream_id); });
  }
  static int header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                    std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                    std::uint8_t, void* user_data) {
    return guard(user_data, [&](Http2Session& s) {
      return s.on_header(frame->hd.stream_id,
                         std::string_view{reinterpret_cast<const char*>(name), namelen},
                         std::string_view{reinterpret_cast<const char*>(value), valuelen});
    });
  }
  static int frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    return guard(user_data, [&](Http2Session& s) {
      return s.on_frame_recv(frame->hd.type, frame->hd.flags, frame->hd.stream_id);
    });
  }
  static int data_chunk(nghttp2_session*, std::uint8_t, std::int32_t stream_id,
                        const std::uint8_t* data, std::size_t len, void* user_data) {
    return guard(user_data, [&](Http2Session& s) { return s.on_data_chunk(stream_id, data, len); });
  }
  static int stream_close(nghttp2_session*, std::int32_t stream_id, std::uint32_t error_code,
                          void* user_data) {
    return guard(user_data, [&](Http2Session& s) { return s.on_stream_close(stream_id, error_code); });
  }
  static int frame_send(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    const std::uint32_t code = frame->hd.type == NGHTTP2_GOAWAY       ? frame->goaway.error_code
                               : frame->hd.type == NGHTTP2_RST_STREAM ? frame->rst_stream.error_code
                                                                      : 0;
    return guard(user_data, [&](Http2Session& s) {
      return s.on_frame_send(frame->hd.type, frame->hd.flags, frame->hd.stream_id, code);
    });
  }
};

Http2Session::Http2Session(Worker& worker, ByteStream& stream, std::shared_ptr<void> stream_owner,
                           IpAddress peer, std::string peer_text)
    : worker_(worker),
      stream_owner_(std::move(stream_owner)),
      stream_(stream),
      peer_(peer),
      peer_text_(std::move(peer_text)),
      in_(kReadBytes),
      idle_timer_(stream_.get_executor()),
      write_timer_(stream_.get_executor()) {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, Http2Callbacks::begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, Http2Callbacks::header);
  nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks, Http2Callbacks::begin_frame);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, Http2Callbacks::frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, Http2Callbacks::data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, Http2Callbacks::stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, Http2Callbacks::frame_send);
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  // Request bodies are credited back as the upstream takes them.
  nghttp2_option_set_no_auto_window_update(option, 1);
  nghttp2_session_server_new2(&session_, callbacks, this, option);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
  worker_.add_session(this);
}

Http2Session::~Http2Session() {
  if (idle_since_) worker_.idle_changed(-1);
  nghttp2_session_del(session_);
  worker_.remove_session(this);
}

void Http2Session::start(std::string_view received) {
  const auto& server = worker_.config()->server;
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, server.http2.max_concurrent_streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(server.max_header_bytes)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
  update_idle();
  if (!received.empty() &&
      !receive(reinterpret_cast<const std::uint8_t*>(received.data()), received.size())) {
    return;
  }
  flush();
  read();
}

// ---- Reading and writing ----------------------------------------------------

void Http2Session::read() {
  // After nghttp2 gave up on the session (final_goaway_), nothing more is read.
  if (reading_ || closed_ || lingering_ || !final_goaway_.empty() ||
      out_.size() >= kMaxPendingOut) {
    return;
  }
  if (nghttp2_session_want_read(session_) == 0) return;
  reading_ = true;
  stream_.async_read_some(asio::buffer(in_),
                          handler([](Http2Session& self, beast::error_code ec, std::size_t n) {
                            self.on_read(ec, n);
                          }));
}

void Http2Session::on_read(beast::error_code ec, std::size_t n) {
  reading_ = false;
  if (closed_) return;
  if (lingering_) return ec ? close() : linger();
  if (ec) return close();  // the client went (or the idle timeout closed it)
  if (!receive(in_.data(), n)) return;
  flush();
  read();
}

bool Http2Session::receive(const std::uint8_t* data, std::size_t n) {
  if (!final_goaway_.empty()) return false;  // given up on already: its GOAWAY is going
  ssize_t rv = 0;
  {
    receiving_ = true;
    struct Done {
      bool& flag;
      ~Done() { flag = false; }
    } done{receiving_};
    rv = nghttp2_session_mem_recv(session_, data, n);
  }
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
  if (!writing_) write_final_goaway();
  return false;
}

// The last frame of a connection nghttp2 gave up on, written after whatever
// write is in flight; then the close.
void Http2Session::write_final_goaway() {
  writing_ = true;
  arm_write_timer();
  asio::async_write(stream_, asio::buffer(final_goaway_),
                    handler([](Http2Session& self, beast::error_code ec, std::size_t) {
                      self.writing_ = false;
                      if (ec) return self.close();
                      self.graceful_close();
                    }));
}

void Http2Session::flush() {
  // Inside nghttp2's callbacks nothing is sent: receive()'s caller flushes.
  if (writing_ || closed_ || receiving_ || !final_goaway_.empty()) return;
  while (out_.size() < kMaxPendingOut) {
    const std::uint8_t* data = nullptr;
    const auto n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      spdlog::warn("client {}: HTTP/2 send failed: {}", peer_text_,
                   nghttp2_strerror(static_cast<int>(n)));
      return close();
    }
    if (n == 0) break;
    out_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
  if (out_.empty()) {
    // Nothing more to say and nothing more to hear (GOAWAY both ways, or a
    // drain with every stream done): the connection is over.
    if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
      return graceful_close();
    }
    if (draining_ && streams_.empty()) return graceful_close();
    return;
  }
  writing_ = true;
  arm_write_timer();
  asio::async_write(stream_, asio::buffer(out_),
                    handler([](Http2Session& self, beast::error_code ec, std::size_t) {
                      self.on_written(ec);
                    }));
}

// A client that takes no byte for send_timeout is closed: its connection
// would otherwise hold what is queued for it forever.
void Http2Session::arm_write_timer() {
  const auto generation = ++write_generation_;
  write_timer_.expires_after(worker_.config()->server.send_timeout);
  write_timer_.async_wait(handler([generation](Http2Session& self, beast::error_code ec) {
    if (ec || generation != self.write_generation_ || !self.writing_) return;
    spdlog::debug("client {}: HTTP/2 connection not reading, closing", self.peer_text_);
    self.close();
  }));
}

void Http2Session::request_flush() {
  if (flush_posted_ || closed_) return;
  flush_posted_ = true;
  asio::post(stream_.get_executor(), handler([](Http2Session& self) {
               self.flush_posted_ = false;
               self.flush();
               self.read();
             }));
}

void Http2Session::on_written(beast::error_code ec) {
  writing_ = false;
  ++write_generation_;
  write_timer_.cancel();
  out_.clear();
  if (out_.capacity() > 2 * kMaxPendingOut) out_.shrink_to_fit();
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
  ++write_generation_;
  write_timer_.expires_after(kLingerTimeout);
  write_timer_.async_wait(handler([](Http2Session& self, beast::error_code ec) {
    if (!ec) self.close();
  }));
  if (!reading_) linger();
}

void Http2Session::linger() {
  reading_ = true;
  stream_.socket().async_read_some(
      asio::buffer(in_), handler([](Http2Session& self, beast::error_code ec, std::size_t) {
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
  idle_timer_.cancel();
  write_timer_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  // Every stream still open ends with the connection.
  auto streams = std::move(streams_);
  streams_.clear();
  for (auto& [id, s] : streams) s->on_closed(NGHTTP2_CANCEL);
  if (idle_since_) {
    idle_since_.reset();
    worker_.idle_changed(-1);
  }
}

// No stream open: the connection is idle (for the worker's shedding, and for
// idle_timeout).
void Http2Session::update_idle() {
  const bool idle = streams_.empty() && !closed_;
  if (idle == idle_since_.has_value()) return;
  if (!idle) {
    idle_since_.reset();
    worker_.idle_changed(-1);
    idle_timer_.cancel();
    return;
  }
  idle_since_ = Clock::now();
  worker_.idle_changed(1);
  idle_timer_.expires_after(worker_.config()->server.idle_timeout);
  idle_timer_.async_wait(handler([](Http2Session& self, beast::error_code ec) {
    if (ec || self.closed_ || !self.idle_since_) return;
    if (Clock::now() - *self.idle_since_ < self.worker_.config()->server.idle_timeout) return;
    // Idle too long: GOAWAY, then the close.
    self.draining_ = true;
    nghttp2_submit_goaway(self.session_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(self.session_),
                          NGHTTP2_NO_ERROR, nullptr, 0);
    self.flush();
  }));
}

// ---- nghttp2's callbacks ------------------------------------------------------

Http2Stream* Http2Session::stream(std::int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

// HEADERS on a stream id that was used before, or lower than one used
// (nghttp2 would drop it quietly): a client not playing by the rules.
int Http2Session::on_begin_headers_frame(std::int32_t stream_id) {
  if (stream_id % 2 == 0 || stream_id > max_client_stream_) {
    max_client_stream_ = std::max(max_client_stream_, stream_id);
    return 0;
  }
  nghttp2_stream* open = nghttp2_session_find_stream(session_, stream_id);
  if (open && nghttp2_stream_get_state(open) != NGHTTP2_STREAM_STATE_CLOSED) return 0;  // trailers
  // Late trailers of a stream Sluice reset are ignored (RFC 9113, 5.1).
  if (std::find(reset_streams_.begin(), reset_streams_.end(), stream_id) != reset_streams_.end()) {
    return 0;
  }
  goaway(NGHTTP2_PROTOCOL_ERROR, "stream_id_reused");
  return 0;
}

int Http2Session::on_begin_headers(std::int32_t stream_id) {
  if (draining_) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_REFUSED_STREAM);
    return 0;
  }
  auto s = std::make_shared<Http2Stream>(*this, shared_from_this(), stream_id);
  nghttp2_session_set_stream_user_data(session_, stream_id, s.get());
  s->start_head_timer();
  streams_.emplace(stream_id, std::move(s));
  update_idle();
  return 0;
}

int Http2Session::on_header(std::int32_t stream_id, std::string_view name,
                            std::string_view value) {
  auto* s = stream(stream_id);
  if (!s || s->on_header(name, value)) return 0;
  // Many times max_header_bytes: an attack on the connection, not a request.
  header_list_abuse();
  return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
}

int Http2Session::on_frame_recv(std::uint8_t type, std::uint8_t flags, std::int32_t stream_id) {
  auto* s = stream(stream_id);
  if (!s) return 0;
  const bool end_stream = (flags & NGHTTP2_FLAG_END_STREAM) != 0;
  // The first HEADERS is the request head; a second one (trailers) only ends the body.
  if (type == NGHTTP2_HEADERS && !s->headers_done()) {
    s->on_headers_done(end_stream);
  } else if ((type == NGHTTP2_HEADERS || type == NGHTTP2_DATA) && end_stream) {
    s->on_end_stream();
  }
  return 0;
}

int Http2Session::on_data_chunk(std::int32_t stream_id, const std::uint8_t* data, std::size_t n) {
  // The connection's window comes back as DATA arrives; a stream's only as
  // its body is read (Http2Stream::fill_read), which bounds what it holds.
  // Streams whose bodies nobody reads yet (in the pipeline, waiting for an
  // upstream connection) thus never stall the uploads of the others.
  nghttp2_session_consume_connection(session_, n);
  if (auto* s = stream(stream_id)) s->on_data(data, n);
  return 0;
}

int Http2Session::on_stream_close(std::int32_t stream_id, std::uint32_t error_code) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return 0;
  auto s = std::move(it->second);
  streams_.erase(it);
  s->on_closed(error_code);
  update_idle();
  return 0;
}

int Http2Session::on_frame_send(std::uint8_t type, std::uint8_t flags, std::int32_t stream_id,
                                std::uint32_t error_code) {
  if (type == NGHTTP2_GOAWAY) {
    count_goaway(error_code);
    return 0;
  }
  if (type == NGHTTP2_RST_STREAM) {
    reset_streams_.push_back(stream_id);
    if (reset_streams_.size() > kRememberedResets) reset_streams_.pop_front();
  }
  if (type == NGHTTP2_RST_STREAM && error_code == NGHTTP2_REFUSED_STREAM && !draining_) {
    // A stream beyond max_concurrent_streams: a client that keeps opening
    // them is not playing by the settings.
    if (++refused_streams_ > kMaxRefusedStreams) goaway(NGHTTP2_ENHANCE_YOUR_CALM, "too_many_streams");
    return 0;
  }
  if ((type == NGHTTP2_HEADERS || type == NGHTTP2_DATA) && (flags & NGHTTP2_FLAG_END_STREAM)) {
    // The response is whole: a request body still coming is not wanted.
    if (auto* s = stream(stream_id); s && !s->request_complete()) {
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_NO_ERROR);
    }
  }
  return 0;
}

}  // namespace sluice
