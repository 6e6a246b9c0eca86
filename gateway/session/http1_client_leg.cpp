// The client session as its exchange's client leg (client_leg.hpp): the
// request body read from this HTTP/1.1 connection through its parser, 100
// Continue, and the response framed for it (Content-Length passed on, or
// chunked, or delimited by the close for an HTTP/1.0 client), the head going
// in one write with the first piece of the body.
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>

#include "gateway/session/http1_session.hpp"
#include "gateway/session/request_path.hpp"
#include "upstream/field_scan.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

}  // namespace

bool Http1Session::expects_continue() const {
  const auto& req = parser_->get();
  return req.version() == 11 &&
         beast::iequals(field_value(req, http::field::expect), "100-continue");
}

void Http1Session::send_continue() {
  static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  set_deadline(Side::kClient, request_.config().server.send_timeout);
  asio::async_write(stream_, asio::buffer(kContinue),
                    handler([](Http1Session& self, beast::error_code ec, std::size_t) {
                      self.request_.exchange().on_continue_sent(ec);
                    }));
}

void Http1Session::read_body(std::span<char> into) {
  // Room for a large read once what was buffered is used up; bounded by
  // max_header_bytes (buffer_.max_size()), which also bounds chunk-size
  // lines and trailers.
  if (buffer_.size() == 0 && buffer_.capacity() < buffer_.max_size()) {
    buffer_.reserve(buffer_.max_size());
  }
  auto& body = parser_->get().body();
  body.data = into.data();
  body.size = into.size();
  set_deadline(Side::kClient, request_.config().server.body_timeout);
  body_read_.in_flight = true;
  body_read_.backstop = false;
  http::async_read_some(
      stream_, buffer_, *parser_,
      handler([size = into.size()](Http1Session& self, beast::error_code ec, std::size_t) {
        self.body_read_.in_flight = false;
        if (ec == http::error::need_buffer) ec = {};
        const std::size_t n = ec ? 0 : size - self.parser_->get().body().size;
        self.request_.exchange().on_body_read(ec, n);
      }));
}

bool Http1Session::cancel_stalled_body_read() {
  if (!body_read_.in_flight || body_read_.backstop) return false;
  // Cancelling misses a read that is between two of its system calls: the
  // session then closes the socket a little later.
  body_read_.backstop = true;
  beast::error_code ignored;
  stream_.socket().cancel(ignored);
  return true;
}

void Http1Session::start_response(const ResponseStart& start) {
  ResponseHeadOptions options = request_.response_head_options();
  if (start.status == 101) {
    // A WebSocket upgrade: the head goes first on the tunnel.
    res_.keep_alive = false;
    options.websocket = true;
    serialize_response_head(res_.head, start.status, start.reason, *start.fields, options);
    return;
  }
  const bool client_http11 = parser_->get().version() == 11;
  const auto framing =
      frame_response(start.has_body, start.content_length.has_value(), client_http11);
  res_.chunked = framing.chunked;
  keep_alive_.ends_with_close = framing.ends_with_close;
  res_.keep_alive = keep_open(false);
  options.chunked = res_.chunked;
  options.content_length = start.content_length;
  options.keep_alive = res_.keep_alive;
  options.announce_keep_alive = !client_http11 && res_.keep_alive;
  serialize_response_head(res_.head, start.status, start.reason, *start.fields, options);
  res_.head_pending = true;
}

// The pending head (once), then the piece as it is or as one chunk, then the
// last chunk, in one write; the buffer list lives in the session.
void Http1Session::send_response(const char* data, std::size_t n, bool last) {
  const std::size_t count = frame_piece(
      res_.out_buffers, std::exchange(res_.head_pending, false) ? std::string_view{res_.head} : "",
      data, n, res_.chunked, last, res_.chunk_prefix);
  set_deadline(Side::kClient, request_.config().server.send_timeout);
  asio::async_write(stream_, std::span<const asio::const_buffer>{res_.out_buffers.data(), count},
                    handler([](Http1Session& self, beast::error_code ec, std::size_t) {
                      self.request_.exchange().on_response_sent(ec);
                    }));
}

}  // namespace sluice
