// The HTTP/2 stream as its exchange's sink: the response head as HEADERS,
// its body as DATA as the client's windows allow (a piece is done once
// nghttp2 has framed it), trailers, 100 Continue, and Sluice's own replies.
#include <algorithm>
#include <cstring>

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "common/ascii.hpp"
#include "common/decimal.hpp"
#include "common/soon.hpp"
#include "gateway/session/grpc_reply.hpp"
#include "gateway/session/http2_session.hpp"
#include "gateway/session/http2_stream.hpp"
#include "gateway/session/local_reply.hpp"
#include "upstream/h2/h2_head.hpp"
#include "upstream/h2/h2_header_block.hpp"
#include "upstream/h2/h2_nv.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// nghttp2's data source: the stream the callback is for gives its bytes (no
// exception crosses nghttp2's frames; user_data: the session).
ssize_t read_stream_data(nghttp2_session* session, std::int32_t stream_id, std::uint8_t* buf,
                         std::size_t length, std::uint32_t* flags, nghttp2_data_source*,
                         void* user_data) noexcept {
  return call_guarded(*static_cast<Http2Session*>(user_data),
                      ssize_t{NGHTTP2_ERR_CALLBACK_FAILURE}, [&]() -> ssize_t {
                        auto* stream = static_cast<Http2Stream*>(
                            nghttp2_session_get_stream_user_data(session, stream_id));
                        if (!stream) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
                        return stream->read_response(buf, length, flags);
                      });
}

}  // namespace

// ---- The response (the exchange's sink) -----------------------------------------

void Http2Stream::set_response_trailers(const HttpFields& trailers) {
  h2_trailer_fields(response_trailers_, trailers);
}

void Http2Stream::start_response(const ResponseStart& start) {
  ResponseHeadOptions options = request_.response_head_options();
  options.content_length = start.content_length;
  H2HeaderBlock& block = thread_header_block();
  response_fields(block, *start.fields, options);
  submit_head(start.status, block, start.has_body);
}

// nghttp2 copies the block as it takes it: the thread's block is free again.
void Http2Stream::submit_head(unsigned status, H2HeaderBlock& block, bool body) {
  char digits[3] = {'0', '0', '0'};  // an upstream's status is 100-999 (Http1Leg, H2Leg)
  const std::string_view status_text(digits, 3);
  put_decimal_before(digits + 3, status % 1000);
  const std::span<const nghttp2_nv> nva = block.nva(status_text, session_.seed_names());
  nghttp2_data_provider provider{};
  provider.read_callback = read_stream_data;
  head_submitted_ = true;
  if (!body) response_done_ = true;
  if (closed_) return;
  const int rv = nghttp2_submit_response(session_.nghttp2(), id_, nva.data(), nva.size(),
                                         body ? &provider : nullptr);
  if (rv != 0) spdlog::debug("HTTP/2 stream {}: response not submitted: {}", id_, nghttp2_strerror(rv));
  session_.request_flush();
}

bool Http2Stream::expects_continue() const {
  return ascii::iequals(head_.request()[http::field::expect], "100-continue");
}

// An interim 100 HEADERS frame: the client may send its body.
void Http2Stream::send_continue() {
  if (!closed_) {
    static const std::string kStatus = ":status";
    static const std::string k100 = "100";
    const nghttp2_nv nv = h2_nv(kStatus, k100);
    nghttp2_submit_headers(session_.nghttp2(), NGHTTP2_FLAG_NONE, id_, nullptr, &nv, 1, nullptr);
    session_.request_flush();
  }
  const bool gone = closed_;
  post_soon(session_.executor(), handler([gone](Http2Stream& self) {
               self.exchange().on_continue_sent(gone ? asio::error::operation_aborted
                                                    : beast::error_code{});
             }));
}

void Http2Stream::send_response(const char* data, std::size_t n, bool last) {
  if (response_done_ || (n == 0 && !last) || closed_) {
    // Nothing to frame: the head alone goes (or went), with its HEADERS.
    const bool gone = closed_ && !response_done_;
    post_soon(session_.executor(), handler([gone](Http2Stream& self) {
                 self.exchange().on_response_sent(gone ? asio::error::operation_aborted
                                                      : beast::error_code{});
               }));
    session_.request_flush();
    return;
  }
  piece_ = data;
  piece_left_ = n;
  piece_last_ = last;
  piece_pending_ = true;
  set_deadline(Side::kClient, request_.config().server.send_timeout);
  nghttp2_session_resume_data(session_.nghttp2(), id_);
  session_.request_flush();
}

long Http2Stream::read_response(std::uint8_t* buf, std::size_t length, std::uint32_t* flags) {
  if (!piece_pending_) return NGHTTP2_ERR_DEFERRED;
  const std::size_t n = std::min(length, piece_left_);
  std::memcpy(buf, piece_, n);
  piece_ += n;
  piece_left_ -= n;
  if (piece_left_ > 0) return static_cast<long>(n);
  piece_pending_ = false;
  if (piece_last_) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    response_done_ = true;
    if (!response_trailers_.empty()) {
      // The trailers end the stream (a gRPC call's grpc-status).
      const auto nva = response_trailers_.nva();
      if (nghttp2_submit_trailer(session_.nghttp2(), id_, nva.data(), nva.size()) == 0) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
    }
  }
  if (request_.in_exchange()) {
    // Framed: the relay buffer may take the next piece.
    post_soon(session_.executor(), handler([](Http2Stream& self) {
                 self.exchange().on_response_sent({});
               }));
  }
  return static_cast<long>(n);
}

void Http2Stream::send_local(LocalReply reply, bool) {
  const std::string& request_id = request_.request_id();
  request_.set_local_status(reply.status);
  if (closed_ || head_submitted_) {
    // Too late for a reply: a response that began is cut.
    if (!closed_ && !response_done_) {
      reset(NGHTTP2_INTERNAL_ERROR);
      session_.request_flush();
    }
    const unsigned upstream = exchange().upstream_status();
    request_.record(closed_ ? 499 : upstream ? upstream : 502);
    return;
  }
  H2HeaderBlock& block = thread_header_block();
  block.clear();
  const auto add = [&block](std::string_view name, std::string_view value) {
    block.add(name, value);
  };
  add("x-request-id", request_id);
  for (auto& [name, value] : request_.response_headers()) add(name, value);
  for (auto& [name, value] : reply.headers) add(name, value);
  if (head_.grpc()) {
    add("content-type", "application/grpc");
    add("grpc-status", std::to_string(grpc_status_for(reply.status)));
    add("grpc-message", grpc_percent_encode(reason_for(reply.status)));
    submit_head(200, block, false);
  } else {
    with_trace_id(reply, request_.info().trace_id);
    add("server", "sluice");
    if (!reply.content_type.empty()) add("content-type", reply.content_type);
    add("content-length", std::to_string(reply.body.size()));
    const bool body = head_.request().method() != http::verb::head && !reply.body.empty();
    local_body_ = std::move(reply.body);
    if (body) {
      // Ready before the head is submitted: nghttp2 may ask for it at once.
      piece_ = local_body_.data();
      piece_left_ = local_body_.size();
      piece_last_ = true;
      piece_pending_ = true;
      set_deadline(Side::kClient, request_.config().server.send_timeout);
    }
    submit_head(reply.status, block, body);
  }
  request_.record(reply.status);
  session_.request_flush();
}

}  // namespace sluice
