// The relays of UpstreamExchange: the request (head, 100 Continue, body) from
// the client leg to the upstream, then the response (head, body) from the
// upstream to the client leg, through the relay buffer, a piece at a time.
#include "upstream/exchange/upstream_exchange.hpp"

#include <algorithm>
#include <iterator>

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
  prepare_request_head(upstream_->server);
  req_head_pending_ = true;
  // Body bytes already read with the head: send head and body in one write.
  if (!client_.body_done() && progress_ != Progress::kContinueOwed && client_.body_at_hand()) {
    return read_client_body();
  }
  write_upstream(nullptr, 0, false,
                 upstream_handler([](UpstreamExchange& self, beast::error_code ec, std::size_t) {
                   self.on_request_head_sent(ec);
                 }));
}

// The buffer list lives here: the write may outlast this call.
template <class Handler>
void UpstreamExchange::write_upstream(const char* data, std::size_t n, bool last,
                                      Handler&& handler) {
  const std::size_t count = frame_piece(
      out_buffers_, std::exchange(req_head_pending_, false) ? std::string_view{req_head_} : "",
      data, n, request_.chunked, last, chunk_prefix_);
  host_.set_deadline(Side::kUpstream, upstream_timeout(upstream_cfg_->response_timeout));
  asio::async_write(upstream_->stream,
                    std::span<const asio::const_buffer>{out_buffers_.data(), count},
                    std::forward<Handler>(handler));
}

void UpstreamExchange::on_request_head_sent(beast::error_code ec) {
  if (ec) return io_failed(ec);
  if (client_.body_done()) return read_response_head();
  if (progress_ == Progress::kContinueOwed) {
    // The client waits for 100 Continue before sending its body: answer it ourselves.
    progress_ = Progress::kHeadReady;
    return client_.send_continue();
  }
  read_client_body();
}

void UpstreamExchange::on_continue_sent(beast::error_code ec) {
  if (mode_ == Mode::kIdle) return;
  if (mode_ == Mode::kHttp2) return h2_continue_sent(ec);
  if (ec) return abort();
  read_client_body();
}

// The head is serialized once (a retry after a failed connect reuses it).
void UpstreamExchange::prepare_request_head(std::string_view upstream_host) {
  if (progress_ != Progress::kNew) return;
  progress_ = !client_.body_done() && client_.expects_continue() ? Progress::kContinueOwed
                                                                 : Progress::kHeadReady;
  host_.serialize_request_head(req_head_, upstream_host);
}

void UpstreamExchange::read_client_body() {
  if (relay_.empty()) relay_ = host_.relay_buffer();
  client_.read_body(relay_);
}

void UpstreamExchange::on_body_read(beast::error_code ec, std::size_t n) {
  if (mode_ == Mode::kIdle) return;
  if (mode_ == Mode::kHttp2) return h2_body_read(ec, n);
  if (ec) {
    // Already partly sent: the upstream connection is spoiled.
    drop_upstream();
    return end(ExchangeResult::End::kRequestBodyFailed, {}, ec);
  }
  const bool last = client_.body_done();
  if (n == 0 && !last) return read_client_body();  // only framing was read
  write_upstream(relay_.data(), n, last,
                 upstream_handler([](UpstreamExchange& self, beast::error_code ec, std::size_t) {
                   self.on_upstream_body_written(ec);
                 }));
}

void UpstreamExchange::on_upstream_body_written(beast::error_code ec) {
  if (ec) return io_failed(ec);
  if (client_.body_done()) return read_response_head();
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
  if (request_.method == http::verb::head) res_parser_->skip(true);
  host_.set_deadline(Side::kUpstream, upstream_timeout(upstream_cfg_->response_timeout));
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
  head_fields_ = static_cast<std::size_t>(std::distance(res.begin(), res.end()));
  ResponseStart start;
  start.status = upstream_status_;
  start.reason = res.reason();
  start.fields = &res.base();
  start.content_length = to_std(res_parser_->content_length());
  start.has_body = !res_parser_->is_done();
  client_.start_response(start);
  // Body bytes already read with the head: send head and body in one write.
  if (!res_parser_->is_done() && upstream_->buffer.size() > 0) return read_upstream_body();
  send_response(nullptr, 0, res_parser_->is_done());
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
  host_.set_deadline(Side::kUpstream, upstream_timeout(upstream_cfg_->response_timeout));
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
    if (progress_ == Progress::kResponseStarted) return abort();
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
  if (last) relay_trailers();
  send_response(relay_.data(), n, last);
}

// A chunked response's trailers, which the parser added to its fields after
// the head's, go to the client leg (an HTTP/2 client gets them as trailers).
void UpstreamExchange::relay_trailers() {
  const auto& fields = res_parser_->get().base();
  auto it = fields.begin();
  for (std::size_t i = 0; i < head_fields_ && it != fields.end(); ++i) ++it;
  if (it == fields.end()) return;
  trailers_.clear();
  for (; it != fields.end(); ++it) trailers_.insert(it->name_string(), it->value());
  client_.set_response_trailers(trailers_);
}

void UpstreamExchange::send_response(const char* data, std::size_t n, bool last) {
  progress_ = Progress::kResponseStarted;
  client_.send_response(data, n, last);
}

// The response head, or a piece of the body (with the head if it was still
// pending), reached the client.
void UpstreamExchange::on_response_sent(beast::error_code ec) {
  if (mode_ == Mode::kIdle) return;
  if (mode_ == Mode::kHttp2) return h2_response_sent(ec);
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

void UpstreamExchange::note_usage_trailers(const http::fields& head, const http::fields& trailers) {
  if (request_.usage_header.empty()) return;
  const auto in_head = head.count(request_.usage_header);
  const auto in_trailers = trailers.count(request_.usage_header);
  if (in_head + in_trailers == 0) return;
  if (in_head + in_trailers > 1) {
    usage_ = std::string();  // repeated: invalid
    return;
  }
  usage_ = std::string(in_head ? head[request_.usage_header] : trailers[request_.usage_header]);
}

void UpstreamExchange::finish() {
  // Trailers, parsed into the response's fields once its body ended.
  if (res_parser_ && res_parser_->is_done()) note_usage(res_parser_->get().base());
  if (upstream_->tls) keep_tls_session();
  if (reuse_upstream({.upstream_keep_alive = upstream_reusable_,
                      .response_done = res_parser_->is_done(),
                      .request_done = client_.body_done(),
                      .nothing_buffered = upstream_->buffer.size() == 0,
                      .upgrade_asked = request_.websocket})) {
    if (upstream_->buffer.capacity() > kUpstreamHeadBytes) upstream_->buffer.shrink_to_fit();
    pools_.give_back(*upstream_cfg_, std::move(upstream_));
  }
  upstream_.reset();
  end(ExchangeResult::End::kRelayed);
}

}  // namespace sluice
