// The HTTP/1.1 leg's relays: the request (head, 100 Continue, body) from the
// client leg to the upstream, then the response (head, body) from the
// upstream to the client leg, through the relay buffer, a piece at a time;
// and the tunnel a 101 to a WebSocket handshake opens.
#include "upstream/exchange/http1_leg.hpp"

#include <algorithm>
#include <iterator>

#include <spdlog/spdlog.h>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>

#include "upstream/exchange/upstream_exchange.hpp"
#include "upstream/proxy_headers.hpp"
#include "upstream/request_head.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// A read asks the kernel for at most the free capacity of its buffer, so the
// buffers are sized before reading: a response head gets kUpstreamHeadBytes
// (one read for most heads and small bodies), a body being relayed gets room
// for a whole relay piece (reads of 512 bytes would cost a system call and a
// packet each). A pooled connection keeps only the head-sized buffer.
constexpr std::size_t kUpstreamHeadBytes = 4096;

}  // namespace

// ---- The leg's part of the exchange -----------------------------------------

void Http1Leg::start() {
  x_.connect_http1();  // -> send_request_head
}

void Http1Leg::on_deadline() {
  if (!x_.upstream_) return;
  x_.upstream_timed_out_ = true;
  beast::error_code ignored;
  x_.upstream_->stream.socket().close(ignored);
}

void Http1Leg::close() {
  if (tunnel_) tunnel_->stop();
  if (x_.resolving_.resolver) x_.resolving_.resolver->cancel();  // not connected to
  if (!x_.upstream_) return;
  beast::error_code ignored;
  x_.upstream_->stream.socket().close(ignored);
}

void Http1Leg::release() {
  if (tunnel_) tunnel_->stop();
}

void Http1Leg::end(LegEnd how, UpstreamError error) {
  x_.end(how, error);
}

void Http1Leg::reset() {
  res_parser_.reset();
  upstream_reusable_ = false;
}

bool Http1Leg::response_started() const {
  return (x_.upstream_ && x_.upstream_->buffer.size() > 0) ||
         (res_parser_ && res_parser_->got_some());
}

Http1Leg::ParserStorage Http1Leg::take_parser() {
  if (res_parser_) {
    auto& body = res_parser_->get().body();
    body.data = nullptr;
    body.size = 0;
  }
  return res_parser_.release();
}

// ---- The request ----------------------------------------------------------

void Http1Leg::send_request_head() {
  if (x_.begin_request()) write_http1_head(x_.req_head_, *x_.request_.head, x_.upstream_->server);
  req_head_pending_ = true;
  // Body bytes already read with the head: send head and body in one write.
  if (!x_.client_->body_done() && x_.progress_ != UpstreamExchange::Progress::kContinueOwed &&
      x_.client_->body_at_hand()) {
    return x_.read_client_body();
  }
  write_upstream(nullptr, 0, false, handler([](Http1Leg& self, beast::error_code ec, std::size_t) {
                   self.on_request_head_sent(ec);
                 }));
}

// The buffer list lives here: the write may outlast this call.
template <class Handler>
void Http1Leg::write_upstream(const char* data, std::size_t n, bool last, Handler&& handler) {
  const std::size_t count = frame_piece(
      out_buffers_, std::exchange(req_head_pending_, false) ? std::string_view{x_.req_head_} : "",
      data, n, x_.request_.chunked, last, chunk_prefix_);
  x_.host_.set_deadline(Side::kUpstream, x_.upstream_timeout(x_.response_timeout()));
  asio::async_write(x_.upstream_->stream,
                    std::span<const asio::const_buffer>{out_buffers_.data(), count},
                    std::forward<Handler>(handler));
}

void Http1Leg::on_request_head_sent(beast::error_code ec) {
  if (ec) return x_.io_failed(ec);
  if (x_.client_->body_done()) return read_response_head();
  if (x_.progress_ == UpstreamExchange::Progress::kContinueOwed) {
    // The client waits for 100 Continue before sending its body: answer it ourselves.
    x_.progress_ = UpstreamExchange::Progress::kHeadReady;
    return x_.client_->send_continue();
  }
  x_.read_client_body();
}

void Http1Leg::on_continue_sent(beast::error_code ec) {
  if (ec) return x_.abort();
  x_.read_client_body();
}

void Http1Leg::on_body_read(beast::error_code ec, std::size_t n) {
  if (ec) {
    // Already partly sent: the upstream connection is spoiled.
    x_.drop_upstream();
    return x_.end(LegEnd::kRequestBodyFailed, {}, ec);
  }
  // A replayed piece, posted before the host cut the upstream connection.
  if (!x_.upstream_) return x_.abort();
  const bool last = x_.client_->body_done();
  if (n == 0 && !last) return x_.read_client_body();  // only framing was read
  write_upstream(x_.request_.relay.data(), n, last,
                 handler([](Http1Leg& self, beast::error_code ec, std::size_t) {
                   self.on_upstream_body_written(ec);
                 }));
}

void Http1Leg::on_upstream_body_written(beast::error_code ec) {
  if (ec) return x_.io_failed(ec);
  if (x_.client_->body_done()) return read_response_head();
  x_.read_client_body();
}

// ---- The response ---------------------------------------------------------

void Http1Leg::read_response_head() {
  res_parser_.emplace();
  res_parser_->body_limit(boost::none);
  res_parser_->header_limit(kMaxResponseHeadBytes);
  res_parser_->on_chunk_header(chunk_extension_limit_);
  x_.upstream_->buffer.max_size(std::max(kMaxResponseHeadBytes, x_.upstream_->buffer.size()));
  if (x_.upstream_->buffer.capacity() < kUpstreamHeadBytes) {
    x_.upstream_->buffer.reserve(kUpstreamHeadBytes);
  }
  if (x_.request_.method == http::verb::head) res_parser_->skip(true);
  x_.request_sent();
  x_.host_.set_deadline(Side::kUpstream, x_.upstream_timeout(x_.response_timeout()));
  x_.host_.awaiting_response(true);
  http::async_read_header(x_.upstream_->stream, x_.upstream_->buffer, *res_parser_,
                          handler([](Http1Leg& self, beast::error_code ec, std::size_t) {
                            self.on_response_head(ec);
                          }));
}

void Http1Leg::on_response_head(beast::error_code ec) {
  x_.host_.awaiting_response(false);
  if (ec) return x_.io_failed(ec);
  auto& res = res_parser_->get();
  // 101 ends HTTP on this connection (start_tunnel); the other
  // interim responses (100, 102, 103) are dropped.
  if (res.result_int() == 101) return start_tunnel();
  if (res.result_int() / 100 == 1) return read_response_head();
  // A status below 100 is no HTTP status: a malformed head, as a parse error is.
  if (res.result_int() < 100) return x_.io_failed(boost::beast::http::error::bad_status);

  if (!relayable_transfer_coding(res.base())) {
    spdlog::warn("upstream {} server {}: unsupported response Transfer-Encoding",
                 x_.upstream_cfg_->name, x_.upstream_->server);
    x_.note_attempt(UpstreamOutcome::kProtocolError);
    x_.drop_upstream();
    return x_.fail(UpstreamError::kUnsupportedTransferCoding);
  }
  x_.upstream_status_ = res.result_int();
  if (x_.retry_answer(res.base())) return;  // the route's policy retries this status
  x_.upstream_server_ = x_.upstream_->server;
  x_.note_usage(res.base());
  x_.answered();
  upstream_reusable_ = res_parser_->keep_alive();
  head_fields_ = static_cast<std::size_t>(std::distance(res.begin(), res.end()));
  head_elements_.clear();
  if (res_parser_->chunked()) {
    for (const auto& field : res) head_elements_.push_back(&field);
  }
  ResponseStart start;
  start.status = x_.upstream_status_;
  start.reason = res.reason();
  start.fields = &res.base();
  start.content_length = to_std(res_parser_->content_length());
  start.has_body = !res_parser_->is_done();
  x_.start_response(start);
  // Body bytes already read with the head: send head and body in one write.
  if (!res_parser_->is_done() && x_.upstream_->buffer.size() > 0) return read_upstream_body();
  x_.send_response(nullptr, 0, res_parser_->is_done());
}

void Http1Leg::read_upstream_body() {
  // Room for a whole relay piece once what was buffered is used up.
  const std::size_t piece = std::min(x_.request_.relay.size(), x_.upstream_->buffer.max_size());
  if (x_.upstream_->buffer.size() == 0 && x_.upstream_->buffer.capacity() < piece) {
    x_.upstream_->buffer.reserve(piece);
  }
  auto& body = res_parser_->get().body();
  body.data = x_.request_.relay.data();
  body.size = x_.request_.relay.size();
  x_.host_.set_deadline(Side::kUpstream, x_.upstream_timeout(x_.response_timeout()));
  http::async_read_some(x_.upstream_->stream, x_.upstream_->buffer, *res_parser_,
                        handler([](Http1Leg& self, beast::error_code ec, std::size_t) {
                          self.on_upstream_body(ec);
                        }));
}

void Http1Leg::on_upstream_body(beast::error_code ec) {
  if (ec == http::error::need_buffer) ec = {};
  if (ec) {
    spdlog::warn("upstream {} server {}: response body failed: {}", x_.upstream_cfg_->name,
                 x_.upstream_->server, ec.message());
    // Nothing sent to the client yet: it gets a 502. Otherwise all that can
    // be done is to cut the client connection.
    // (The exchange was already counted "ok" when its head arrived.)
    if (x_.progress_ == UpstreamExchange::Progress::kResponseStarted) return x_.abort();
    const bool timed_out = x_.upstream_timed_out_;
    x_.drop_upstream();
    x_.upstream_status_ = 0;
    return x_.fail(timed_out ? UpstreamError::kResponseTimedOut
                             : UpstreamError::kMalformedResponseBody);
  }
  auto& body = res_parser_->get().body();
  const std::size_t n = x_.request_.relay.size() - body.size;
  const bool last = res_parser_->is_done();
  if (n == 0 && !last) return read_upstream_body();
  if (last) relay_trailers();
  x_.send_response(x_.request_.relay.data(), n, last);
}

// A chunked response's trailers, which the parser added to its fields (at
// the end, or beside a head field of the same name), go to the client leg (an
// HTTP/2 client gets them as trailers).
bool Http1Leg::trailers_came() const {
  if (!res_parser_ || !res_parser_->is_done() || !res_parser_->chunked()) return false;
  const HttpFields& fields = res_parser_->get().base();
  return static_cast<std::size_t>(std::distance(fields.begin(), fields.end())) > head_fields_;
}

void Http1Leg::relay_trailers() {
  if (!trailers_came()) return;
  const auto& fields = res_parser_->get().base();
  trailers_.clear();
  std::size_t head = 0;  // the head fields keep their order in the list
  for (const auto& field : fields) {
    if (head < head_elements_.size() && &field == head_elements_[head]) {
      ++head;
      continue;
    }
    trailers_.insert(field.name_string(), field.value());
  }
  x_.client_->set_response_trailers(trailers_);
}

// The response head, or a piece of the body (with the head if it was still
// pending), reached the client.
void Http1Leg::on_response_sent(beast::error_code ec) {
  if (ec) return x_.abort();
  if (res_parser_->is_done()) return finish();
  read_upstream_body();
}

void Http1Leg::finish() {
  // Trailers, parsed into the response's fields (after the head's) once its
  // body ended: read again only when some came.
  if (trailers_came()) x_.note_usage(res_parser_->get().base());
  if (x_.upstream_->tls) x_.keep_tls_session();
  if (reuse_upstream({.upstream_keep_alive = upstream_reusable_,
                      .response_done = res_parser_->is_done(),
                      .request_done = x_.client_->body_done(),
                      .nothing_buffered = x_.upstream_->buffer.size() == 0,
                      .upgrade_asked = x_.request_.websocket})) {
    if (x_.upstream_->buffer.capacity() > kUpstreamHeadBytes) x_.upstream_->buffer.shrink_to_fit();
    x_.pools_.give_back(*x_.upstream_cfg_, std::move(x_.upstream_));
  }
  x_.upstream_.reset();
  x_.end(LegEnd::kRelayed);
}

// ---- An upgrade -----------------------------------------------------------

// The upstream answered 101 Switching Protocols: to a WebSocket handshake
// that it accepts, the exchange becomes a tunnel; to anything else it is a
// protocol error (the client gets a 502, the connection is dropped).
void Http1Leg::start_tunnel() {
  // Either connection closed while the 101 was on its way in: by the drain
  // timeout (the client), or by the upstream deadline.
  if (x_.host_.client_closed()) return x_.abort();
  if (x_.upstream_timed_out_) return x_.io_failed(beast::error::timeout);
  if (!x_.upstream_->stream.socket().is_open()) return x_.abort();
  const auto& res = res_parser_->get();
  const UpgradeStreams client = x_.client_->upgrade_streams();
  if (!x_.request_.websocket || !client.stream || !grants_websocket_upgrade(res.base())) {
    spdlog::warn(
        "upstream {} server {}: 101 Switching Protocols to a request that did not ask "
        "for a WebSocket upgrade",
        x_.upstream_cfg_->name, x_.upstream_->server);
    x_.note_attempt(UpstreamOutcome::kProtocolError);
    x_.drop_upstream();
    return x_.fail(UpstreamError::kUnexpectedUpgrade);
  }
  x_.upstream_status_ = 101;
  x_.upstream_server_ = x_.upstream_->server;
  x_.note_attempt(UpstreamOutcome::kOk);
  ResponseStart start;
  start.status = x_.upstream_status_;
  start.reason = res.reason();
  start.fields = &res.base();
  x_.client_->start_response(start);
  std::string head = x_.client_->upgrade_head();
  res_parser_.reset();
  x_.host_.tunnel_opened();
  x_.req_head_ = {};
  tunnel_ =
      std::make_unique<Tunnel>(x_.host_, *client.stream, *client.buffered, std::move(x_.upstream_),
                               x_.request_.tunnel_idle_timeout, x_.request_.send_timeout);
  tunnel_->start(std::move(head), std::shared_ptr<Tunnel>(x_.self_.lock(), tunnel_.get()));
}

}  // namespace sluice
