// The relays of UpstreamExchange: the request (head, 100 Continue, body) to
// the upstream, then the response (head, body) to the client, through the
// relay buffer, a piece at a time.
#include "upstream/exchange/upstream_exchange.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>

#include "upstream/proxy_headers.hpp"

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

// ---- The request ----------------------------------------------------------

void UpstreamExchange::send_request_head() {
  auto& req = parser_->get();
  // The head is serialized once (a retry after a failed connect reuses it).
  if (!request_rewritten_) {
    request_rewritten_ = true;
    need_continue_ = !parser_->is_done() && req.version() == 11 &&
                     beast::iequals(req[http::field::expect], "100-continue");
    host_.serialize_request_head(req_head_, upstream_->server);
  }
  req_head_pending_ = true;
  // Body bytes already read with the head: send head and body in one write.
  if (!parser_->is_done() && !need_continue_ && buffer_.size() > 0) return read_client_body();
  write_piece(Side::kUpstream, req_head_, req_head_pending_, nullptr, 0, false, false,
              upstream_cfg_->response_timeout,
              upstream_handler([](UpstreamExchange& self, beast::error_code ec, std::size_t) {
                self.on_request_head_sent(ec);
              }));
}

// Writes a pending head (once), then `n` body bytes framed as chunked or raw,
// then the last chunk if `last`, in one write. The buffer list lives here:
// the write may outlast this call.
template <class Handler>
void UpstreamExchange::write_piece(Side side, const std::string& head, bool& head_pending,
                                   const char* data, std::size_t n, bool chunked, bool last,
                                   std::chrono::milliseconds timeout, Handler&& handler) {
  const std::size_t count =
      frame_piece(out_buffers_, std::exchange(head_pending, false) ? std::string_view{head} : "",
                  data, n, chunked, last, chunk_prefix_);
  host_.set_deadline(side, timeout);
  ByteStream& stream = side == Side::kClient ? client_ : upstream_->stream;
  asio::async_write(stream, std::span<const asio::const_buffer>{out_buffers_.data(), count},
                    std::forward<Handler>(handler));
}

void UpstreamExchange::on_request_head_sent(beast::error_code ec) {
  if (ec) return io_failed(ec);
  if (parser_->is_done()) return read_response_head();
  if (need_continue_) {
    // The client waits for 100 Continue before sending its body: answer it ourselves.
    need_continue_ = false;
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    host_.set_deadline(Side::kClient, request_.send_timeout);
    asio::async_write(client_, asio::buffer(kContinue),
                      handler([](UpstreamExchange& self, beast::error_code ec, std::size_t) {
                        if (ec) return self.abort();
                        self.read_client_body();
                      }));
    return;
  }
  read_client_body();
}

void UpstreamExchange::read_client_body() {
  // Room for a large read once what was buffered is used up; bounded by
  // max_header_bytes (buffer_.max_size()), which also bounds chunk-size
  // lines and trailers.
  if (buffer_.size() == 0 && buffer_.capacity() < buffer_.max_size()) {
    buffer_.reserve(buffer_.max_size());
  }
  if (relay_.empty()) relay_ = host_.relay_buffer();
  auto& body = parser_->get().body();
  body.data = relay_.data();
  body.size = relay_.size();
  host_.set_deadline(Side::kClient, request_.body_timeout);
  reading_body_ = true;
  body_timeout_backstop_ = false;
  http::async_read_some(client_, buffer_, *parser_,
                        handler([](UpstreamExchange& self, beast::error_code ec, std::size_t) {
                          self.on_client_body(ec);
                        }));
}

void UpstreamExchange::on_client_body(beast::error_code ec) {
  reading_body_ = false;
  if (ec == http::error::need_buffer) ec = {};
  if (ec) {
    // Already partly sent: the upstream connection is spoiled.
    drop_upstream();
    return end(ExchangeResult::End::kRequestBodyFailed, {}, ec);
  }
  auto& body = parser_->get().body();
  const std::size_t n = relay_.size() - body.size;
  const bool last = parser_->is_done();
  if (n == 0 && !last) return read_client_body();  // only framing was read
  write_piece(Side::kUpstream, req_head_, req_head_pending_, relay_.data(), n, request_.chunked,
              last, upstream_cfg_->response_timeout,
              upstream_handler([](UpstreamExchange& self, beast::error_code ec, std::size_t) {
                self.on_upstream_body_written(ec);
              }));
}

void UpstreamExchange::on_upstream_body_written(beast::error_code ec) {
  if (ec) return io_failed(ec);
  if (parser_->is_done()) return read_response_head();
  read_client_body();
}

// ---- The response ---------------------------------------------------------

void UpstreamExchange::read_response_head() {
  res_parser_.emplace();
  res_parser_->body_limit(boost::none);
  res_parser_->header_limit(kMaxResponseHeadBytes);
  res_parser_->on_chunk_header(chunk_extension_limit_);
  upstream_->buffer.max_size(std::max(kMaxResponseHeadBytes, upstream_->buffer.size()));
  if (upstream_->buffer.capacity() < kUpstreamHeadBytes) {
    upstream_->buffer.reserve(kUpstreamHeadBytes);
  }
  if (parser_->get().method() == http::verb::head) res_parser_->skip(true);
  host_.set_deadline(Side::kUpstream, upstream_cfg_->response_timeout);
  host_.awaiting_response(true);
  http::async_read_header(upstream_->stream, upstream_->buffer, *res_parser_,
                          upstream_handler([](UpstreamExchange& self, beast::error_code ec,
                                              std::size_t) { self.on_response_head(ec); }));
}

void UpstreamExchange::on_response_head(beast::error_code ec) {
  host_.awaiting_response(false);
  if (ec) return io_failed(ec);
  auto& res = res_parser_->get();
  // 101 ends HTTP on this connection (upstream_upgrade.cpp); the other
  // interim responses (100, 102, 103) are dropped.
  if (res.result_int() == 101) return start_tunnel();
  if (res.result_int() / 100 == 1) return read_response_head();

  if (!relayable_transfer_coding(res.base())) {
    spdlog::warn("upstream {} server {}: unsupported response Transfer-Encoding",
                 upstream_cfg_->name, upstream_->server);
    host_.count_upstream(*upstream_cfg_, UpstreamOutcome::kProtocolError);
    drop_upstream();
    return fail(UpstreamError::kUnsupportedTransferCoding);
  }
  upstream_status_ = res.result_int();
  upstream_server_ = upstream_->server;
  note_usage(res.base());
  host_.count_upstream(*upstream_cfg_, UpstreamOutcome::kOk);
  upstream_reusable_ = res_parser_->keep_alive();
  const auto content_length = res_parser_->content_length();
  const bool client_http11 = parser_->get().version() == 11;
  const auto framing =
      frame_response(!res_parser_->is_done(), content_length.has_value(), client_http11);
  res_chunked_out_ = framing.chunked;
  client_keep_alive_ = host_.keep_client(framing.ends_with_close);
  ResponseHeadOptions options;
  options.request_id = request_.request_id;
  options.extra = request_.response_headers;
  options.chunked = res_chunked_out_;
  options.content_length = to_std(content_length);
  options.keep_alive = client_keep_alive_;
  options.announce_keep_alive = !client_http11 && client_keep_alive_;
  options.rules = request_.response_rules;
  options.vars = request_.header_vars;
  serialize_response_head(res_head_, upstream_status_, res.reason(), res.base(), options);
  res_head_pending_ = true;
  // Body bytes already read with the head: send head and body in one write.
  if (!res_parser_->is_done() && upstream_->buffer.size() > 0) return read_upstream_body();
  write_piece(Side::kClient, res_head_, res_head_pending_, nullptr, 0, false, false,
              request_.send_timeout,
              handler([](UpstreamExchange& self, beast::error_code ec, std::size_t) {
                self.on_response_piece_sent(ec);
              }));
}

void UpstreamExchange::read_upstream_body() {
  if (relay_.empty()) relay_ = host_.relay_buffer();
  // Room for a whole relay piece once what was buffered is used up.
  const std::size_t piece = std::min(relay_.size(), upstream_->buffer.max_size());
  if (upstream_->buffer.size() == 0 && upstream_->buffer.capacity() < piece) {
    upstream_->buffer.reserve(piece);
  }
  auto& body = res_parser_->get().body();
  body.data = relay_.data();
  body.size = relay_.size();
  host_.set_deadline(Side::kUpstream, upstream_cfg_->response_timeout);
  http::async_read_some(upstream_->stream, upstream_->buffer, *res_parser_,
                        upstream_handler([](UpstreamExchange& self, beast::error_code ec,
                                            std::size_t) { self.on_upstream_body(ec); }));
}

void UpstreamExchange::on_upstream_body(beast::error_code ec) {
  if (ec == http::error::need_buffer) ec = {};
  if (ec) {
    spdlog::warn("upstream {} server {}: response body failed: {}", upstream_cfg_->name,
                 upstream_->server, ec.message());
    // Nothing sent to the client yet: it gets a 502. Otherwise all that can
    // be done is to cut the client connection.
    // (The exchange was already counted "ok" when its head arrived.)
    if (!res_head_pending_) return abort();
    const bool timed_out = upstream_timed_out_;
    drop_upstream();
    upstream_status_ = 0;
    return fail(timed_out ? UpstreamError::kResponseTimedOut
                          : UpstreamError::kMalformedResponseBody);
  }
  auto& body = res_parser_->get().body();
  const std::size_t n = relay_.size() - body.size;
  const bool last = res_parser_->is_done();
  if (n == 0 && !last) return read_upstream_body();
  write_piece(Side::kClient, res_head_, res_head_pending_, relay_.data(), n, res_chunked_out_, last,
              request_.send_timeout,
              handler([](UpstreamExchange& self, beast::error_code ec, std::size_t) {
                self.on_response_piece_sent(ec);
              }));
}

// The response head, or a piece of the body (with the head if it was still
// pending), reached the client.
void UpstreamExchange::on_response_piece_sent(beast::error_code ec) {
  if (ec) return abort();
  if (res_parser_->is_done()) return finish();
  read_upstream_body();
}

void UpstreamExchange::note_usage(const http::fields& fields) {
  if (request_.usage_header.empty()) return;
  const auto n = fields.count(request_.usage_header);
  if (n == 0) return;
  if (n > 1) {
    usage_ = std::string();  // repeated: invalid
    return;
  }
  usage_ = std::string(fields[request_.usage_header]);
}

void UpstreamExchange::finish() {
  // Trailers, parsed into the response's fields once its body ended.
  if (res_parser_ && res_parser_->is_done()) note_usage(res_parser_->get().base());
  if (upstream_->tls) keep_tls_session();
  if (reuse_upstream({.upstream_keep_alive = upstream_reusable_,
                      .response_done = res_parser_->is_done(),
                      .request_done = parser_->is_done(),
                      .nothing_buffered = upstream_->buffer.size() == 0,
                      .upgrade_asked = request_.websocket})) {
    if (upstream_->buffer.capacity() > kUpstreamHeadBytes) upstream_->buffer.shrink_to_fit();
    pools_.give_back(*upstream_cfg_, std::move(upstream_));
  }
  upstream_.reset();
  end(ExchangeResult::End::kRelayed);
}

}  // namespace sluice
