// H2Connection's nghttp2 session: made with Sluice's settings and windows,
// the callbacks through which nghttp2 reports what the server sent (a
// response's head, DATA, trailers, a stream's close, SETTINGS and GOAWAY),
// and the request side it frames (HEADERS, the body a piece at a time,
// trailers). Everything here runs inside nghttp2's calls made by the
// connection's reads and writes (h2_connection.cpp).
#include <cstring>

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>

#include "common/http_limits.hpp"
#include "upstream/h2/h2_connection.hpp"
#include "upstream/h2/nghttp2_memory.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

// What the server may send on one stream, and on the connection, before
// Sluice gives window back. A stream's window comes back as its client takes
// the response, so a slow client holds at most one stream window in memory;
// the connection's comes back as DATA arrives, so that slow streams never
// stop the connection's other streams.
constexpr std::int32_t kStreamWindow = 256 * 1024;
constexpr std::int32_t kConnectionWindow = 16 * 1024 * 1024;

}  // namespace

struct H2UpstreamCallbacks {
  static H2Connection& of(void* user_data) { return *static_cast<H2Connection*>(user_data); }
  template <class Fn>
  static int guard(void* user_data, Fn fn) noexcept {
    try {
      return fn(of(user_data));
    } catch (const std::exception& e) {
      spdlog::error("upstream {}: HTTP/2 connection: internal error: {}",
                    of(user_data).options_.upstream, e.what());
    } catch (...) {
    }
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  static int header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                    std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                    std::uint8_t, void* user_data) {
    return guard(user_data, [&](H2Connection& c) {
      return c.on_header(frame->hd.stream_id, frame->headers.cat,
                         {reinterpret_cast<const char*>(name), namelen},
                         {reinterpret_cast<const char*>(value), valuelen});
    });
  }
  static int frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    return guard(user_data, [&](H2Connection& c) {
      return c.on_frame_recv(frame->hd.type, frame->hd.flags, frame->hd.stream_id);
    });
  }
  static int data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
                        std::size_t len, void* user_data) {
    return guard(user_data, [&](H2Connection& c) { return c.on_data_chunk(id, data, len); });
  }
  static int stream_close(nghttp2_session*, std::int32_t id, std::uint32_t code, void* user_data) {
    return guard(user_data, [&](H2Connection& c) { return c.on_stream_close(id, code); });
  }
  static ssize_t read_body(nghttp2_session*, std::int32_t id, std::uint8_t* buf, std::size_t length,
                           std::uint32_t* flags, nghttp2_data_source*, void* user_data) {
    return guard(user_data, [&](H2Connection& c) {
      return static_cast<int>(c.read_body(id, buf, length, flags));
    });
  }
};

H2Connection::H2Connection(std::unique_ptr<UpstreamConnection> conn, Options options)
    : conn_(std::move(conn)),
      options_(std::move(options)),
      timer_(conn_->stream.get_executor()),
      ping_timer_(conn_->stream.get_executor()),
      write_timer_(conn_->stream.get_executor()),
      deadlines_(conn_->stream.get_executor()) {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, H2UpstreamCallbacks::header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, H2UpstreamCallbacks::frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks,
                                                            H2UpstreamCallbacks::data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks,
                                                         H2UpstreamCallbacks::stream_close);
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  nghttp2_option_set_no_auto_window_update(option, 1);  // given back as clients take DATA
  nghttp2_session_client_new3(&session_, callbacks, this, option, nghttp2_block_memory());
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<std::uint32_t>(kStreamWindow)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(kMaxResponseHeadBytes)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

H2Connection::~H2Connection() {
  nghttp2_session_del(session_);
}

// ---- Streams ----------------------------------------------------------------------

// The stream's HEADERS go (nghttp2 holds them while the connection is made).
bool H2Connection::submit(const std::shared_ptr<H2Stream>& s, const H2HeaderBlock& head,
                          bool has_body) {
  const auto nva = head.nva({}, name_seeds_.next());
  nghttp2_data_provider provider{};
  provider.read_callback = H2UpstreamCallbacks::read_body;
  const std::int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                                 has_body ? &provider : nullptr, nullptr);
  if (id < 0) {
    // Out of stream ids (or out of memory): no more streams on this one; it
    // goes once those it has are done.
    if (state_ == State::kReady) state_ = State::kGoingAway;
    update_idle();
    return false;
  }
  s->id = id;
  s->state = H2Stream::State::kOpen;
  streams_.emplace(id, s);
  update_idle();
  request_flush();
  return true;
}

long H2Connection::read_body(std::int32_t id, std::uint8_t* buf, std::size_t length,
                             std::uint32_t* flags) {
  H2Stream* s = stream(id);
  if (!s || !s->piece_pending) return NGHTTP2_ERR_DEFERRED;
  const std::size_t n = std::min(length, s->piece_left);
  if (n > 0) std::memcpy(buf, s->piece, n);
  s->piece += n;
  s->piece_left -= n;
  if (s->piece_left > 0) return static_cast<long>(n);
  s->piece_pending = false;
  if (s->piece_last) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (s->request_trailers) {
      H2HeaderBlock trailers;
      h2_trailer_fields(trailers, *s->request_trailers);
      const auto nva = trailers.nva();
      if (!nva.empty() && nghttp2_submit_trailer(session_, id, nva.data(), nva.size()) == 0) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
    }
  }
  wake(*s);
  return static_cast<long>(n);
}

// ---- nghttp2's callbacks ----------------------------------------------------------

int H2Connection::on_header(std::int32_t id, std::uint8_t category, std::string_view name,
                            std::string_view value) {
  (void)category;
  H2Stream* s = stream(id);
  if (!s) return 0;
  s->header_bytes += name.size() + value.size() + 32;
  if (s->header_bytes > kMaxResponseHeadBytes) {
    // Too large a head: the stream is reset (the exchange answers 502).
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  if (!s->head_done()) {
    if (name == ":status") {
      s->status = h2_status(value).value_or(0);
    } else if (!name.empty() && name[0] != ':' && !is_connection_specific(name)) {
      s->head.insert(name, value);
    }
    return 0;
  }
  if (!name.empty() && name[0] != ':' && !is_connection_specific(name)) {
    s->trailers.insert(name, value);
  }
  return 0;
}

int H2Connection::on_frame_recv(std::uint8_t type, std::uint8_t flags, std::int32_t id) {
  if (type == NGHTTP2_SETTINGS && (flags & NGHTTP2_FLAG_ACK) == 0) {
    // How many streams the server takes: those waiting go as far as it allows.
    settings_known_ = true;
    place_queued();
    room_changed(true);
    return 0;
  }
  if (type == NGHTTP2_GOAWAY) {
    // No new streams (those waiting go elsewhere); those the server will not
    // process close as refused.
    if (state_ == State::kReady) state_ = State::kGoingAway;
    place_queued();
    update_idle();
    room_changed(false);
    return 0;
  }
  H2Stream* s = stream(id);
  if (!s) return 0;
  const bool end_stream = (flags & NGHTTP2_FLAG_END_STREAM) != 0;
  if (type == NGHTTP2_HEADERS && !s->head_done()) {
    if (s->status / 100 == 1 && !end_stream) {
      // An interim response (100, 103): dropped.
      s->status = 0;
      s->head.clear();
      s->header_bytes = 0;
      return 0;
    }
    if (s->status == 0 || s->status / 100 == 1) {
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_PROTOCOL_ERROR);
      return 0;
    }
    s->response = H2Stream::Response::kHead;
  }
  if ((type == NGHTTP2_HEADERS || type == NGHTTP2_DATA) && end_stream && s->head_done()) {
    s->response = H2Stream::Response::kWhole;
  }
  if (type == NGHTTP2_HEADERS || end_stream) wake(*s);
  return 0;
}

int H2Connection::on_data_chunk(std::int32_t id, const std::uint8_t* data, std::size_t n) {
  // The connection's window is given back at once (see kConnectionWindow);
  // the stream's when its client has taken the bytes (consume()).
  nghttp2_session_consume_connection(session_, n);
  H2Stream* s = stream(id);
  if (!s || !s->wake) return 0;  // nobody takes it
  s->data.append(reinterpret_cast<const char*>(data), n);
  wake(*s);
  return 0;
}

int H2Connection::on_stream_close(std::int32_t id, std::uint32_t error_code) {
  const auto s = streams_.take(id);
  if (!s) return 0;
  s->state = H2Stream::State::kClosed;
  s->error_code = error_code;
  wake(*s);
  place_queued();  // before the SETTINGS: the next one goes
  update_idle();
  if (settings_known_ && usable()) room_changed(false);
  return 0;
}

}  // namespace sluice
