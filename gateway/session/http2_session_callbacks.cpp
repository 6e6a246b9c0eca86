// The HTTP/2 session's side of libnghttp2: the server session it makes, and
// nghttp2's callbacks, each forwarding to the session (or to its stream).
#include <nghttp2/nghttp2.h>

#include "gateway/session/http2_session.hpp"
#include "gateway/session/http2_stream.hpp"
#include "upstream/block_allocator.hpp"
#include "upstream/h2/nghttp2_memory.hpp"

namespace sluice {
namespace {

// Streams refused beyond max_concurrent_streams before the connection goes.
constexpr std::uint64_t kMaxRefusedStreams = 100;
// The streams Sluice reset lately, whose late frames are no offence.
constexpr std::size_t kRememberedResets = 128;

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
      write_timer_(stream_.get_executor()),
      deadlines_(stream_.get_executor()) {
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
  nghttp2_session_server_new3(&session_, callbacks, this, option, nghttp2_block_memory());
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
  worker_.add_session(this);
}

// ---- nghttp2's callbacks ------------------------------------------------------

Http2Stream* Http2Session::stream(std::int32_t id) {
  return streams_.find(id);
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
  // From the thread's block cache: a stream's state is a few KiB, made and
  // freed once per request.
  static_assert(sizeof(Http2Stream) + 64 <= block_cache::kLargest,
                "an HTTP/2 stream (and its shared_ptr's count) fits the largest cached block");
  auto s = std::allocate_shared<Http2Stream>(BlockAllocator<Http2Stream>{}, *this,
                                             shared_from_this(), stream_id);
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
  const auto s = streams_.take(stream_id);
  if (!s) return 0;
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
