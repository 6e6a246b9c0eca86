#include "gateway/session/http2_stream.hpp"

#include <algorithm>
#include <cstring>

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "common/ascii.hpp"
#include "gateway/metrics.hpp"
#include "gateway/session/client_read_error.hpp"
#include "gateway/session/exchange_log.hpp"
#include "gateway/session/grpc_reply.hpp"
#include "gateway/session/http2_session.hpp"
#include "gateway/session/local_reply.hpp"
#include "gateway/session/request_path.hpp"
#include "upstream/h2/h2_head.hpp"
#include "upstream/h2/h2_nv.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// A decoded header list this many times max_header_bytes is no request: an
// HPACK bomb (small frames that decode to a huge list).
constexpr std::size_t kHeaderBombFactor = 4;
// What SETTINGS_MAX_HEADER_LIST_SIZE counts per field beyond its name and value.
constexpr std::size_t kFieldOverhead = 32;

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

std::string lower(std::string_view name) {
  std::string s(name);
  ascii::to_lower_in_place(s);
  return s;
}

}  // namespace

Http2Stream::Http2Stream(Http2Session& session, std::shared_ptr<Http2Session> owner,
                         std::int32_t id)
    : session_(session),
      owner_(std::move(owner)),
      id_(id),
      config_(session.worker().config()),
      deadline_(session.executor()),
      exchange_(*this, *this, session.executor(), session.worker().pools()) {
  req_.version(11);
}

Http2Stream::~Http2Stream() {
  session_.worker().return_relay_buffer(std::move(relay_));
}

// ---- The request head -------------------------------------------------------

void Http2Stream::start_head_timer() {
  set_deadline(Side::kClient, config_->server.header_timeout);
}

bool Http2Stream::on_header(std::string_view name, std::string_view value) {
  header_bytes_ += name.size() + value.size() + kFieldOverhead;
  const std::size_t limit = config_->server.max_header_bytes;
  if (header_bytes_ > limit * kHeaderBombFactor) return false;
  if (headers_done_) {
    // A request's trailers, for an HTTP/2 upstream (within max_header_bytes),
    // but for those meant for Sluice alone.
    if (header_bytes_ <= limit && !name.empty() && name.front() != ':' &&
        !(info_.route && is_sluice_only(sluice_only_headers(*info_.route), name))) {
      request_trailers_.insert(name, value);
      has_request_trailers_ = true;
    }
    return true;
  }
  if (header_bytes_ > limit) {
    header_too_large_ = true;
    return true;
  }
  if (header_too_large_) return true;
  if (!name.empty() && name.front() == ':') {
    // nghttp2 has checked the pseudo-headers (which, once each, before the rest).
    if (name == ":method") method_ = value;
    if (name == ":path") path_ = value;
    if (name == ":authority") authority_ = value;
    if (name == ":scheme") scheme_ = value;
    return true;
  }
  if (name == "cookie") {
    // Cookie crumbs are one Cookie header again for HTTP/1.1.
    if (!cookies_.empty()) cookies_.append("; ");
    cookies_.append(value);
    return true;
  }
  if (name == "content-type" && is_grpc_content_type(value)) grpc_ = true;
  if (name == "host" && !authority_.empty()) return true;  // :authority wins
  req_.insert(name, value);
  return true;
}

void Http2Stream::on_headers_done(bool end_stream) {
  deadline_.clear();
  headers_done_ = true;
  end_stream_ = end_stream;
  body_complete_ = end_stream;
  started_ = Clock::now();
  config_ = session_.worker().config();
  info_.client_ip = session_.peer();
  req_.method_string(method_);
  req_.target(path_);
  if (!authority_.empty()) req_.set(http::field::host, authority_);
  if (!cookies_.empty()) req_.set(http::field::cookie, cookies_);
  if (header_too_large_) {
    return send_local(make_local_reply(431, "request header fields too large",
                                       generate_request_id()));
  }
  if (req_.count(http::field::content_length) > 0) {
    content_length_ = h2_content_length(req_[http::field::content_length]);
  }
  if (content_length_ && *content_length_ > config_->server.max_body_bytes) {
    return send_local(make_local_reply(413, "request body too large", generate_request_id()));
  }
  BodyFacts body;
  body.done = end_stream;
  // A body of unknown length goes to an HTTP/1.1 upstream chunked.
  body.chunked = !end_stream && !content_length_;
  auto refusal = admit_request(req_, body, session_.peer(), session_.over_tls(), *config_, info_);
  if (refusal) return send_local(std::move(*refusal));

  begin_pipeline(pipeline_, req_, info_, config_, started_);
  run_pipeline();
}

// ---- Middleware ---------------------------------------------------------------

void Http2Stream::run_pipeline() {
  if (closed_) return;
  auto result = pipeline_.advance(session_.worker().chain(), *this);
  if (result.step == MiddlewareStep::kPending) return;
  on_middleware_outcome(std::move(result.reply));
}

MiddlewareDone Http2Stream::take() {
  return handler([](Http2Stream& self, std::optional<LocalReply> reply) {
    self.client_gone_ = nullptr;
    if (self.closed_) return;  // reset meanwhile: the outcome is dropped
    if (reply) {
      self.on_middleware_outcome(std::move(reply));
    } else {
      self.run_pipeline();
    }
    self.session_.request_flush();
  });
}

void Http2Stream::watch_client(std::function<void()> gone) {
  if (closed_) return;
  client_gone_ = std::move(gone);
}

void Http2Stream::on_middleware_outcome(std::optional<LocalReply> reply) {
  response_headers_ = pipeline_.take_response_headers();
  if (reply) return send_local(std::move(*reply));
  start_upstream();
}

// ---- The upstream exchange ------------------------------------------------------

void Http2Stream::start_upstream() {
  set_header_vars(info_, client_ip_text_, header_vars_);
  in_exchange_ = true;
  exchange_.start(exchange_request(*config_, info_, req_),
                  std::shared_ptr<UpstreamExchange>(shared_from_this(), &exchange_));
}

std::span<char> Http2Stream::relay_buffer() {
  if (!relay_) relay_ = session_.worker().take_relay_buffer();
  return {relay_.get(), Worker::kRelayBufferSize};
}

void Http2Stream::serialize_request_head(std::string& out, std::string_view upstream_host) {
  // A request without a body but of a method that may have one still says so.
  std::optional<std::uint64_t> length = content_length_;
  if (!length && info_.body.done && req_.method() != http::verb::get &&
      req_.method() != http::verb::head) {
    length = 0;
  }
  serialize_forwarded_head(out, req_, info_, pipeline_.context(), header_vars_,
                           session_.peer_text(), upstream_host, length);
}

bool Http2Stream::draining() const { return session_.draining(); }

void Http2Stream::count_upstream(const UpstreamConfig& upstream, UpstreamOutcome outcome) {
  session_.worker().series().count_upstream(config_, upstream, outcome);
}

void Http2Stream::count_connection(const UpstreamConfig& upstream) {
  session_.worker().metrics().add("sluice_upstream_connections_total",
                                  scratch_labels({{"upstream", upstream.name}}));
}

void Http2Stream::count_retry() { session_.worker().metrics().add("sluice_upstream_retries_total", ""); }

void Http2Stream::exchange_ended(const ExchangeResult& result) {
  in_exchange_ = false;
  // The exchange's buffers are no longer lent to this stream: a body read
  // or a response piece still pending is dropped (DATA that arrives now is
  // not copied into a relay buffer about to go back to the worker). A local
  // reply below lends its own.
  pending_read_.reset();
  piece_pending_ = false;
  piece_ = nullptr;
  piece_left_ = 0;
  switch (result.end) {
    case ExchangeResult::End::kRelayed:
      record(exchange_.upstream_status());
      break;
    case ExchangeResult::End::kUpstreamFailed:
      send_local(make_local_reply(status_for(result.error), message_for(result.error),
                                  info_.request_id));
      break;
    case ExchangeResult::End::kRequestBodyFailed: {
      if (result.body_error == beast::error::timeout) {
        send_local(make_local_reply(408, "request body not received in time", info_.request_id));
        break;
      }
      const ClientReadError error = client_read_error(result.body_error, ReadPhase::kBody);
      if (error.status != 0 && !closed_) {
        send_local(make_local_reply(error.status, error.message, info_.request_id));
        break;
      }
      reset(NGHTTP2_CANCEL);
      record(499);
      break;
    }
    case ExchangeResult::End::kAborted: {
      reset(NGHTTP2_INTERNAL_ERROR);
      const unsigned status = exchange_.upstream_status();
      record(status ? status : 499);
      break;
    }
  }
  // Recorded: the relay buffer goes back to the worker for the next stream
  // now, not when this stream's last handler has gone.
  exchange_.reset();
  session_.worker().return_relay_buffer(std::move(relay_));
  session_.request_flush();
}

void Http2Stream::on_internal_error(std::string_view what) noexcept {
  session_.on_internal_error(what);
}

void Http2Stream::set_deadline(Side side, Clock::duration timeout) {
  deadline_.expires_after(side, timeout, *this);
}

void Http2Stream::on_deadline(Side side) {
  if (side == Side::kUpstream) return exchange_.on_upstream_deadline();
  if (!headers_done_) {
    // A header block left unfinished: nothing else may come on the
    // connection until it ends, so the connection goes.
    return session_.header_timeout();
  }
  // The client sent no body byte, or took no response byte, in time.
  if (pending_read_) {
    pending_read_.reset();
    asio::post(session_.executor(), handler([](Http2Stream& self) {
                 self.exchange_.on_body_read(beast::error::timeout, 0);
               }));
    return;
  }
  if (piece_pending_) {
    piece_pending_ = false;
    reset(NGHTTP2_CANCEL);
    if (in_exchange_) {
      asio::post(session_.executor(), handler([](Http2Stream& self) {
                   self.exchange_.on_response_sent(beast::error::timeout);
                 }));
    }
    session_.request_flush();
  }
}

// ---- The request body (the exchange's source) -----------------------------------

void Http2Stream::on_data(const std::uint8_t* data, std::size_t n) {
  body_received_ += n;
  if (body_too_large_ || body_received_ > config_->server.max_body_bytes) {
    body_too_large_ = true;  // dropped (the connection's window had it back)
  } else {
    body_.append(reinterpret_cast<const char*>(data), n);
  }
  fill_read();
}

void Http2Stream::on_end_stream() {
  end_stream_ = true;
  fill_read();
}

void Http2Stream::read_body(std::span<char> into) {
  if (closed_) {
    asio::post(session_.executor(), handler([](Http2Stream& self) {
                 self.exchange_.on_body_read(asio::error::operation_aborted, 0);
               }));
    return;
  }
  pending_read_ = into;
  fill_read();
  if (pending_read_) set_deadline(Side::kClient, config_->server.body_timeout);
}

void Http2Stream::cancel_read() {
  if (!pending_read_) return;
  pending_read_.reset();
  asio::post(session_.executor(), handler([](Http2Stream& self) {
               self.exchange_.on_body_read(asio::error::operation_aborted, 0);
             }));
}

void Http2Stream::fill_read() {
  if (!pending_read_) return;
  if (body_too_large_) {
    pending_read_.reset();
    asio::post(session_.executor(), handler([](Http2Stream& self) {
                 self.exchange_.on_body_read(http::error::body_limit, 0);
               }));
    return;
  }
  if (body_.empty() && !end_stream_) return;  // waits for DATA
  const std::size_t n = std::min(pending_read_->size(), body_.size());
  std::memcpy(pending_read_->data(), body_.data(), n);
  body_.erase(0, n);
  pending_read_.reset();
  // The exchange learns of the body's end with the read that hands out its
  // last byte (or none), never between two of its reads.
  if (body_.empty() && end_stream_) body_complete_ = true;
  // The stream's window credited back now that the upstream takes them.
  if (n > 0 && !closed_) nghttp2_session_consume_stream(session_.nghttp2(), id_, n);
  asio::post(session_.executor(), handler([n](Http2Stream& self) {
               self.exchange_.on_body_read({}, n);
               self.session_.request_flush();
             }));
}

// ---- The response (the exchange's sink) -----------------------------------------

void Http2Stream::set_response_trailers(const http::fields& trailers) {
  response_trailers_.clear();
  for (const auto& f : trailers) {
    std::string name = lower(f.name_string());
    if (name.empty() || name.front() == ':' || is_connection_specific(name) || name == "te") {
      continue;
    }
    response_trailers_.emplace_back(std::move(name), std::string(f.value()));
  }
}

void Http2Stream::start_response(const ResponseStart& start) {
  ResponseHeadOptions options = response_head_options(info_, response_headers_, header_vars_);
  options.content_length = start.content_length;
  response_fields(fields_, *start.fields, options);
  submit_head(start.status, fields_, start.has_body);
}

void Http2Stream::submit_head(unsigned status,
                              const std::vector<std::pair<std::string, std::string>>& fields,
                              bool body) {
  const std::string status_text = std::to_string(status);
  static const std::string kStatus = ":status";
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size() + 1);
  nva.push_back(h2_nv(kStatus, status_text));
  for (const auto& [name, value] : fields) nva.push_back(h2_nv(name, value));
  nghttp2_data_provider provider{};
  provider.read_callback = read_stream_data;
  head_submitted_ = true;
  if (!body) response_done_ = true;
  if (closed_) return;
  const int rv =
      nghttp2_submit_response(session_.nghttp2(), id_, nva.data(), nva.size(), body ? &provider : nullptr);
  if (rv != 0) spdlog::debug("HTTP/2 stream {}: response not submitted: {}", id_, nghttp2_strerror(rv));
  session_.request_flush();
}

bool Http2Stream::expects_continue() const {
  return ascii::iequals(req_[http::field::expect], "100-continue");
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
  asio::post(session_.executor(), handler([gone](Http2Stream& self) {
               self.exchange_.on_continue_sent(gone ? asio::error::operation_aborted
                                                    : beast::error_code{});
             }));
}

void Http2Stream::send_response(const char* data, std::size_t n, bool last) {
  if (response_done_ || (n == 0 && !last) || closed_) {
    // Nothing to frame: the head alone goes (or went), with its HEADERS.
    const bool gone = closed_ && !response_done_;
    asio::post(session_.executor(), handler([gone](Http2Stream& self) {
                 self.exchange_.on_response_sent(gone ? asio::error::operation_aborted
                                                      : beast::error_code{});
               }));
    session_.request_flush();
    return;
  }
  piece_ = data;
  piece_left_ = n;
  piece_last_ = last;
  piece_pending_ = true;
  set_deadline(Side::kClient, config_->server.send_timeout);
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
      std::vector<nghttp2_nv> nva;
      nva.reserve(response_trailers_.size());
      for (const auto& [name, value] : response_trailers_) nva.push_back(h2_nv(name, value));
      if (nghttp2_submit_trailer(session_.nghttp2(), id_, nva.data(), nva.size()) == 0) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
    }
  }
  if (in_exchange_) {
    // Framed: the relay buffer may take the next piece.
    asio::post(session_.executor(), handler([](Http2Stream& self) {
                 self.exchange_.on_response_sent({});
               }));
  }
  return static_cast<long>(n);
}

// Sluice's own reply: to a gRPC call a Trailers-Only gRPC reply, else the
// status with the JSON body.
void Http2Stream::send_local(LocalReply reply) {
  if (info_.request_id.empty()) generate_request_id(info_.request_id);
  local_status_ = reply.status;
  if (closed_ || head_submitted_) {
    // Too late for a reply: a response that began is cut.
    if (!closed_ && !response_done_) {
      reset(NGHTTP2_INTERNAL_ERROR);
      session_.request_flush();
    }
    record(closed_ ? 499 : exchange_.upstream_status() ? exchange_.upstream_status() : 502);
    return;
  }
  fields_.clear();
  const auto add = [this](std::string_view name, std::string_view value) {
    fields_.emplace_back(lower(name), std::string(value));
  };
  add("x-request-id", info_.request_id);
  for (auto& [name, value] : response_headers_) add(name, value);
  for (auto& [name, value] : reply.headers) add(name, value);
  if (grpc_) {
    add("content-type", "application/grpc");
    add("grpc-status", std::to_string(grpc_status_for(reply.status)));
    add("grpc-message", grpc_percent_encode(reason_for(reply.status)));
    submit_head(200, fields_, false);
  } else {
    with_trace_id(reply, info_.trace_id);
    add("server", "sluice");
    add("content-type", reply.content_type);
    add("content-length", std::to_string(reply.body.size()));
    const bool body = req_.method() != http::verb::head && !reply.body.empty();
    local_body_ = std::move(reply.body);
    if (body) {
      // Ready before the head is submitted: nghttp2 may ask for it at once.
      piece_ = local_body_.data();
      piece_left_ = local_body_.size();
      piece_last_ = true;
      piece_pending_ = true;
      set_deadline(Side::kClient, config_->server.send_timeout);
    }
    submit_head(reply.status, fields_, body);
  }
  record(reply.status);
  session_.request_flush();
}

void Http2Stream::reset(std::uint32_t code) {
  if (closed_ || response_done_) return;
  nghttp2_submit_rst_stream(session_.nghttp2(), NGHTTP2_FLAG_NONE, id_, code);
}

// ---- The end ----------------------------------------------------------------------

void Http2Stream::on_closed(std::uint32_t error_code) {
  if (closed_) return;
  closed_ = true;
  if (in_exchange_ && awaiting_response_ && info_.route && info_.route->ignore_client_abort) {
    // The route lets the upstream finish a request whose client left: the
    // exchange goes on under its upstream deadline, and the answer nobody
    // reads ends it (send_response fails it as aborted).
    body_.clear();
    return;
  }
  deadline_.cancel();
  exchange_.cancel_wait();
  body_.clear();  // nobody will read it (the connection's window had it back)
  if (client_gone_) {
    auto gone = std::move(client_gone_);
    client_gone_ = nullptr;
    gone();
  }
  if (in_exchange_ && response_done_ && error_code == NGHTTP2_NO_ERROR) {
    // The response went whole: the exchange finishes on its own, once a body
    // read still in flight (the request was cut) has ended.
    cancel_read();
    return;
  }
  if (in_exchange_) {
    // Reset by the client (or the connection went): what is pending fails
    // and the exchange ends as aborted.
    exchange_.close_upstream_socket();
    if (pending_read_) {
      pending_read_.reset();
      asio::post(session_.executor(), handler([](Http2Stream& self) {
                   self.exchange_.on_body_read(asio::error::operation_aborted, 0);
                 }));
    }
    if (piece_pending_) {
      piece_pending_ = false;
      asio::post(session_.executor(), handler([](Http2Stream& self) {
                   self.exchange_.on_response_sent(asio::error::operation_aborted);
                 }));
    }
    return;
  }
  if (!recorded_) record(error_code == NGHTTP2_NO_ERROR && local_status_ ? local_status_ : 499);
}

void Http2Stream::end_pipeline() {
  pipeline_.end({local_status_ ? local_status_ : exchange_.upstream_status(), exchange_.usage()});
}

void Http2Stream::record(unsigned status) {
  if (recorded_) return;
  recorded_ = true;
  if (!headers_done_) return;
  end_pipeline();
  ExchangeRecord record;
  record.route = info_.route;
  record.have_head = true;
  record.method = req_.method_string();
  record.protocol = "HTTP/2";
  record.target = info_.original_target.empty() ? std::string_view{req_.target()}
                                                : std::string_view{info_.original_target};
  record.client_ip = info_.client_ip;
  record.request_id = info_.request_id;
  record.status = status;
  record.upstream_status = exchange_.upstream_status();
  record.local_status = local_status_;
  record.upstream_server = exchange_.upstream_server();
  record.started = started_;
  record.decision = &pipeline_.context().decision;
  record.trace_id = info_.trace_id;
  log_exchange(record, config_, session_.worker().series(), session_.worker().chain().observers);
}

}  // namespace sluice
