// UpstreamExchange with an HTTP/2 upstream (protocol h2c or h2): the request
// goes as a stream on a connection the worker shares among its exchanges
// (h2_connection.hpp). Its body is relayed from the client leg once the
// connection is ready, a piece at a time; the response head, its DATA (given
// back to the flow-control window as the client takes it) and its trailers
// are relayed to the client leg, overlapping with the request body when the
// leg is full duplex (a bidirectional gRPC call over an HTTP/2 stream).
//
// The exchange's wait for the upstream is its own timer (response_timeout
// between upstream events, bounded by the request's deadline), so that the
// host's one deadline stays the client's.
#include <algorithm>
#include <utility>

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <boost/beast/http/status.hpp>

#include "upstream/exchange/upstream_exchange.hpp"
#include "upstream/h2/h2_connection.hpp"
#include "upstream/h2/h2_head.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// How long an HTTP/2 connection to an upstream stays open without a stream.
constexpr std::chrono::seconds kH2IdleTimeout{60};

std::optional<std::uint64_t> content_length(const http::fields& fields) {
  const auto it = fields.find(http::field::content_length);
  if (it == fields.end()) return std::nullopt;
  return h2_content_length(it->value());
}

}  // namespace

// ---- The stream -------------------------------------------------------------------

void UpstreamExchange::start_h2() {
  h2_release();
  h2_conn_ = pools_.h2_connection(*upstream_cfg_, server_index_);
  upstream_reused_ = h2_conn_ != nullptr;
  h2_opened_ = false;
  if (!h2_conn_) {
    auto conn = pools_.open(*upstream_cfg_, server_index_);
    if (!conn) return wait_for_connection();
    const auto& hp = upstream_cfg_->servers[server_index_];
    conn->address = hp;
    conn->server = hp.to_string();
    H2Connection::Options options;
    options.upstream = upstream_cfg_->name;
    options.tls = upstream_cfg_->tls;
    if (options.tls) options.resume = pools_.tls_session(*upstream_cfg_, server_index_);
    options.connect_timeout = upstream_cfg_->connect_timeout;
    options.ping_timeout = upstream_cfg_->connect_timeout;
    options.write_timeout = upstream_cfg_->response_timeout;
    options.idle_timeout =
        upstream_cfg_->max_idle_connections == 0 ? std::chrono::milliseconds{0} : kH2IdleTimeout;
    h2_conn_ = std::make_shared<H2Connection>(std::move(conn), std::move(options));
    pools_.add_h2(*upstream_cfg_, server_index_, h2_conn_);
    h2_opened_ = true;
    h2_conn_->connect();
  }
  open_h2_stream();
}

void UpstreamExchange::open_h2_stream() {
  upstream_server_ = upstream_cfg_->servers[server_index_].to_string();
  if (!h2_head_) {
    prepare_request_head(upstream_server_);
    h2_head_ = h2_request_fields(req_head_, upstream_cfg_->tls ? "https" : "http");
    if (!h2_head_) throw std::logic_error("the request head could not be put in HTTP/2 terms");
  }
  const bool has_body = !client_.body_done();
  const auto generation = ++h2_generation_;
  h2_ = h2_conn_->open_stream(*h2_head_, has_body, [weak = self_, generation] {
    if (auto self = weak.lock(); self && generation == self->h2_generation_) {
      self->post_h2_progress();
    }
  });
  if (!h2_) {
    // The connection went away as the stream was to open: once more on another.
    if (retried_on_fresh_) return fail(UpstreamError::kConnectionFailed);
    retried_on_fresh_ = true;
    return start_h2();
  }
  h2_request_ = has_body ? H2Request::kWaitingForConnection : H2Request::kDone;
  h2_response_ = H2Response::kAwaitingHead;
  h2_last_sent_ = false;
  h2_touch();
  if (!has_body) host_.awaiting_response(true);
  h2_progress();
}

void UpstreamExchange::post_h2_progress() {
  if (h2_progress_posted_) return;
  h2_progress_posted_ = true;
  asio::post(executor_, handler([generation = h2_generation_](UpstreamExchange& self) {
               self.h2_progress_posted_ = false;
               if (self.mode_ == Mode::kHttp2 && generation == self.h2_generation_) {
                 self.h2_progress();
               }
             }));
}

// Looks at the stream and moves each relay on as far as it can.
void UpstreamExchange::h2_progress() {
  if (!h2_) return;
  H2Stream& s = *h2_;
  if (s.connect_failure) return h2_connect_failed();
  if (h2_opened_ && h2_conn_->connected()) {
    // Counted once, by the exchange that opened it.
    h2_opened_ = false;
    pools_.mark_ok(*upstream_cfg_, server_index_);
    host_.count_connection(*upstream_cfg_);
  }
  if (h2_request_ == H2Request::kWaitingForConnection && (h2_conn_->connected() || s.closed)) {
    h2_start_body();
  }
  if (h2_request_ == H2Request::kSending && (!s.piece_pending || s.closed)) {
    // The piece went (or never will: the stream ended).
    if (s.piece_last || s.closed) {
      h2_request_ = H2Request::kDone;
      if (h2_response_ == H2Response::kAwaitingHead) host_.awaiting_response(true);
    } else {
      h2_touch();
      h2_request_ = H2Request::kReading;
      read_client_body();
    }
  }
  if (h2_response_ == H2Response::kAwaitingHead) {
    // A leg that is not full duplex gets the response once the request went.
    const bool may_respond = client_.full_duplex() || h2_request_ == H2Request::kDone ||
                             (s.closed && h2_request_ != H2Request::kReading &&
                              h2_request_ != H2Request::kContinuing);
    if (s.head_done && may_respond) return h2_head();
    if (s.closed && !s.head_done) return h2_stream_failed();
    return;
  }
  if (h2_response_ == H2Response::kRelaying) h2_relay();
}

// The connection is ready: the body goes (after 100 Continue when the
// client waits for it).
void UpstreamExchange::h2_start_body() {
  h2_request_ = H2Request::kReading;
  if (h2_->closed) {
    h2_request_ = H2Request::kDone;
    return;
  }
  if (progress_ == Progress::kContinueOwed) {
    progress_ = Progress::kHeadReady;
    h2_request_ = H2Request::kContinuing;
    return client_.send_continue();  // -> h2_continue_sent
  }
  read_client_body();
}

// The 100 Continue went (or failed): the body is read, or an end that came
// meanwhile (it waited for the write) happens now.
void UpstreamExchange::h2_continue_sent(beast::error_code ec) {
  h2_request_ = H2Request::kDone;  // nothing in flight on the client leg
  if (h2_pending_end_) {
    const auto [how, error] = *h2_pending_end_;
    h2_pending_end_.reset();
    return h2_end(how, error);
  }
  if (ec) return abort();
  h2_request_ = H2Request::kReading;
  read_client_body();
}

void UpstreamExchange::h2_body_read(beast::error_code ec, std::size_t n) {
  if (h2_request_ == H2Request::kCancelling) {
    // The read that had to end before the exchange could.
    h2_request_ = H2Request::kDone;
    if (h2_pending_end_) {
      const auto [how, error] = *h2_pending_end_;
      h2_pending_end_.reset();
      return h2_end(how, error);
    }
    return h2_progress();
  }
  if (h2_request_ != H2Request::kReading) return;
  if (!h2_) {
    // The upstream side was closed for a client that left (close_upstream_socket):
    // the read that failed with it ends the exchange.
    h2_request_ = H2Request::kDone;
    return abort();
  }
  if (ec) {
    h2_request_ = H2Request::kDone;
    h2_release();
    return end(ExchangeResult::End::kRequestBodyFailed, {}, ec);
  }
  const bool last = client_.body_done();
  if (n == 0 && !last) return read_client_body();  // only framing was read
  if (h2_->closed) {
    // The stream ended while the client was still sending: the rest is not wanted.
    h2_request_ = H2Request::kDone;
    return h2_progress();
  }
  h2_request_ = H2Request::kSending;
  h2_touch();
  h2_conn_->send_body(*h2_, relay_.data(), n, last, last ? client_.request_trailers() : nullptr);
}

// ---- The response -----------------------------------------------------------------

void UpstreamExchange::h2_head() {
  H2Stream& s = *h2_;
  host_.awaiting_response(false);
  upstream_status_ = s.status;
  note_usage(s.head);
  host_.count_upstream(*upstream_cfg_, UpstreamOutcome::kOk);
  ResponseStart start;
  start.status = s.status;
  start.reason = http::obsolete_reason(static_cast<http::status>(s.status));
  start.fields = &s.head;
  start.content_length = content_length(s.head);
  const bool bodiless = request_.method == http::verb::head || s.status == 204 || s.status == 304;
  start.has_body = !bodiless && !(s.end_stream && s.data.empty() && !s.has_trailers);
  // An HTTP/1.1 client learns that no body follows from the length (a
  // gRPC Trailers-Only reply says none).
  if (!start.has_body && !bodiless) start.content_length = 0;
  client_.start_response(start);
  if (!start.has_body) {
    // Nothing follows the head (whatever the server sent with it is dropped).
    h2_response_ = H2Response::kSending;
    h2_last_sent_ = true;
    return send_response(nullptr, 0, true);
  }
  h2_response_ = H2Response::kRelaying;
  if (s.data.empty() && !s.end_stream) {
    // The head goes at once: a streaming response's first message may be long in coming.
    h2_response_ = H2Response::kSending;
    return send_response(nullptr, 0, false);
  }
  h2_relay();
}

void UpstreamExchange::h2_relay() {
  H2Stream& s = *h2_;
  if (s.data.empty() && !s.end_stream) {
    if (s.closed) {
      // Cut short after its head went: all that can be done is to cut the client's.
      spdlog::warn("upstream {} server {}: HTTP/2 response cut short (code {})",
                   upstream_cfg_->name, upstream_server_, s.error_code);
      return abort();
    }
    return h2_touch();  // waits for DATA
  }
  h2_out_.clear();
  h2_out_.swap(s.data);
  h2_out_owed_ = h2_out_.size();
  h2_last_sent_ = s.end_stream;
  if (h2_last_sent_ && s.has_trailers) {
    note_usage_trailers(s.head, s.trailers);
    client_.set_response_trailers(s.trailers);
  }
  h2_response_ = H2Response::kSending;
  send_response(h2_out_.data(), h2_out_.size(), h2_last_sent_);
}

void UpstreamExchange::h2_response_sent(beast::error_code ec) {
  if (h2_response_ != H2Response::kSending) return;
  if (ec || !h2_) return abort();
  h2_conn_->consume(*h2_, std::exchange(h2_out_owed_, 0));
  h2_out_.clear();
  if (h2_last_sent_) {
    h2_response_ = H2Response::kDone;
    if (upstream_cfg_->tls) {
      if (auto session = h2_conn_->take_tls_session()) {
        pools_.keep_tls_session(*upstream_cfg_, server_index_, std::move(session));
      }
    }
    return h2_end(ExchangeResult::End::kRelayed);
  }
  h2_response_ = H2Response::kRelaying;
  h2_touch();
  h2_relay();
}

// ---- Failures -----------------------------------------------------------------------

// The stream ended before a response head came.
void UpstreamExchange::h2_stream_failed() {
  const H2Stream& s = *h2_;
  if (host_.client_closed() && !upstream_timed_out_) return abort();
  if (s.tls_alert) {
    // A TLS alert after the handshake (a refused client certificate under
    // TLS 1.3; the connection logged its reason): a TLS failure.
    host_.count_upstream(*upstream_cfg_, UpstreamOutcome::kTlsError);
    h2_release();
    return h2_end(ExchangeResult::End::kUpstreamFailed, UpstreamError::kTlsFailed);
  }
  // Refused (the server's GOAWAY or RST_STREAM REFUSED_STREAM): the server
  // did not process it, so it may go again whatever its method, if none of
  // its body went (it cannot be read twice).
  // What was read of the body cannot be read again.
  const bool body_untouched =
      request_.body_empty || h2_request_ == H2Request::kWaitingForConnection;
  const bool refused = s.error_code == NGHTTP2_REFUSED_STREAM && body_untouched;
  FailedAttempt attempt;
  attempt.stage = FailedAttempt::Stage::kExchange;
  attempt.idempotent = is_idempotent(request_.method);
  attempt.servers_tried = tried_.size();
  attempt.closed_by_server = s.connection_broke;
  attempt.pooled_connection = upstream_reused_;
  attempt.retried_on_fresh = retried_on_fresh_;
  attempt.body_empty = request_.body_empty;
  if (body_untouched &&
      ((refused && !retried_on_fresh_) || retry_rule(attempt) == Retry::kFreshConnection)) {
    host_.count_retry();
    retried_on_fresh_ = true;
    h2_request_ = H2Request::kDone;
    return start_h2();
  }
  spdlog::warn("upstream {} server {}: HTTP/2 stream ended before a response head ({})",
               upstream_cfg_->name, upstream_server_,
               s.connection_broke ? "the connection failed" : nghttp2_http2_strerror(s.error_code));
  host_.count_upstream(*upstream_cfg_, s.error_code == NGHTTP2_PROTOCOL_ERROR
                                           ? UpstreamOutcome::kProtocolError
                                           : UpstreamOutcome::kReset);
  h2_release();
  upstream_status_ = 0;
  h2_end(ExchangeResult::End::kUpstreamFailed, UpstreamError::kConnectionFailed);
}

// The connection never became ready: like a failed connect, the server
// goes into cool-down and the request may go to the next one.
void UpstreamExchange::h2_connect_failed() {
  const H2ConnectFailure failure = *h2_->connect_failure;
  host_.count_upstream(*upstream_cfg_, failure.outcome);
  pools_.mark_failed(*upstream_cfg_, server_index_);
  h2_release();
  last_connect_error_ = failure.error;
  FailedAttempt attempt;
  attempt.stage = FailedAttempt::Stage::kConnect;
  attempt.idempotent = is_idempotent(request_.method);
  attempt.servers_tried = tried_.size();
  if (h2_request_ != H2Request::kReading && retry_rule(attempt) == Retry::kNextServer) {
    h2_request_ = H2Request::kDone;
    return try_next_server();
  }
  h2_end(ExchangeResult::End::kUpstreamFailed, failure.error);
}

void UpstreamExchange::h2_end(ExchangeResult::End how, UpstreamError error) {
  if (h2_request_ == H2Request::kContinuing) {
    // The 100 Continue's write must end first (h2_continue_sent).
    h2_pending_end_ = {how, error};
    return;
  }
  if (h2_request_ == H2Request::kReading || h2_request_ == H2Request::kCancelling) {
    // The client leg's read must end first; the exchange ends with it.
    h2_pending_end_ = {how, error};
    if (h2_request_ == H2Request::kReading) {
      h2_request_ = H2Request::kCancelling;
      client_.cancel_read();
    }
    return;
  }
  h2_release();
  end(how, error);
}

// ---- The wait for the upstream ------------------------------------------------------

// The upstream has response_timeout (to the request's deadline) from now for
// its next event. The timer is re-armed lazily (it fires, finds the deadline
// moved, and waits again).
void UpstreamExchange::h2_touch() {
  const auto timeout = upstream_timeout(upstream_cfg_->response_timeout);
  h2_deadline_ = Clock::now() + timeout;
  // A leg that is not full duplex has one deadline (HTTP/1.1): while it
  // does nothing the wait is the upstream's, not its last read's or write's.
  if (!client_.full_duplex() && h2_request_ != H2Request::kReading &&
      h2_response_ != H2Response::kSending) {
    host_.set_deadline(Side::kUpstream, timeout);
  }
  if (h2_timer_armed_) return;
  if (!h2_timer_) h2_timer_ = std::make_unique<Timer>(executor_);
  h2_timer_armed_ = true;
  h2_timer_->expires_at(h2_deadline_);
  h2_timer_->async_wait(handler([generation = h2_generation_](UpstreamExchange& self,
                                                              beast::error_code ec) {
    if (generation != self.h2_generation_) return;  // cancelled with its stream
    self.h2_timer_armed_ = false;
    if (!ec) self.on_h2_timer(generation);
  }));
}

void UpstreamExchange::on_h2_timer(std::uint64_t generation) {
  if (mode_ != Mode::kHttp2 || !h2_) return;
  const bool deadline_passed = deadline_at_ <= Clock::now();
  // A client slow to take the response is its leg's business (send_timeout).
  const bool client_side = h2_response_ == H2Response::kSending && !deadline_passed;
  if (Clock::now() < h2_deadline_ || client_side) {
    if (client_side) h2_deadline_ = Clock::now() + upstream_cfg_->response_timeout;
    h2_timer_armed_ = true;
    h2_timer_->expires_at(h2_deadline_);
    h2_timer_->async_wait(handler([generation](UpstreamExchange& self, beast::error_code ec) {
      if (generation != self.h2_generation_) return;
      self.h2_timer_armed_ = false;
      if (!ec) self.on_h2_timer(generation);
    }));
    return;
  }
  upstream_timed_out_ = true;
  spdlog::warn("upstream {} server {}: no HTTP/2 response in time", upstream_cfg_->name,
               upstream_server_);
  // Is it this stream, or the server? (A server that answers nothing loses the connection.)
  if (h2_conn_ && !deadline_passed) h2_conn_->probe();
  if (progress_ == Progress::kResponseStarted) return abort();
  host_.count_upstream(*upstream_cfg_, UpstreamOutcome::kTimeout);
  h2_release();
  h2_end(ExchangeResult::End::kUpstreamFailed, UpstreamError::kResponseTimedOut);
}

void UpstreamExchange::on_h2_deadline() {
  if (!h2_) return;
  h2_deadline_ = Clock::now();
  on_h2_timer(h2_generation_);
}

// Lets go of the stream (reset if still open) and of the connection.
void UpstreamExchange::h2_release() {
  if (h2_timer_armed_) {
    h2_timer_->cancel();
    h2_timer_armed_ = false;
  }
  // A piece the client leg did not finish taking is still given back to the
  // connection's window (its bytes stay in h2_out_ while the leg may read them).
  if (h2_ && h2_conn_) h2_conn_->consume(*h2_, std::exchange(h2_out_owed_, 0));
  h2_out_owed_ = 0;
  if (h2_ && h2_conn_) h2_conn_->release(*h2_);
  h2_.reset();
  h2_conn_.reset();
  ++h2_generation_;
}

}  // namespace sluice
