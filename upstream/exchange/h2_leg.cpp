// The HTTP/2 leg's stream and relays: the request goes as a stream on a
// shared connection, its body once the connection is ready; the response
// head, DATA and trailers come back to the client leg. How an attempt ends,
// and the wait for the upstream: h2_leg_end.cpp.
#include "upstream/exchange/h2_leg.hpp"

#include <utility>

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <boost/beast/http/status.hpp>

#include "common/soon.hpp"
#include "upstream/exchange/upstream_exchange.hpp"
#include "upstream/h2/h2_connection.hpp"
#include "upstream/request_head.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// How long an HTTP/2 connection to an upstream stays open without a stream.
constexpr std::chrono::seconds kH2IdleTimeout{60};

std::optional<std::uint64_t> content_length(const HttpFields& fields) {
  const auto it = fields.find(http::field::content_length);
  if (it == fields.end()) return std::nullopt;
  return h2_content_length(it->value());
}

}  // namespace

// ---- The stream -------------------------------------------------------------------

void H2Leg::start() {
  release();
  conn_ = x_.pools_.h2_connection(*x_.upstream_cfg_, x_.server_index_);
  x_.upstream_reused_ = conn_ != nullptr;
  opened_ = false;
  if (!conn_) {
    auto conn = x_.pools_.open(*x_.upstream_cfg_, x_.server_index_);
    if (!conn) return x_.wait_for_connection();
    const auto& hp = x_.upstream_cfg_->servers[x_.server_index_];
    conn->address = hp;
    conn->server = hp.to_string();
    H2Connection::Options options;
    options.upstream = x_.upstream_cfg_->name;
    options.tls = x_.upstream_cfg_->tls;
    if (options.tls) options.resume = x_.pools_.tls_session(*x_.upstream_cfg_, x_.server_index_);
    options.connect_timeout = x_.upstream_cfg_->connect_timeout;
    options.ping_timeout = x_.upstream_cfg_->connect_timeout;
    options.write_timeout = x_.upstream_cfg_->response_timeout;
    options.idle_timeout =
        x_.upstream_cfg_->max_idle_connections == 0 ? std::chrono::milliseconds{0} : kH2IdleTimeout;
    conn_ = std::make_shared<H2Connection>(std::move(conn), std::move(options));
    x_.pools_.add_h2(*x_.upstream_cfg_, x_.server_index_, conn_);
    opened_ = true;
    conn_->connect();
  }
  open_stream();
}

void H2Leg::open_stream() {
  x_.upstream_server_ = x_.upstream_cfg_->servers[x_.server_index_].to_string();
  if (x_.begin_request()) {
    write_h2_head(head_, *x_.request_.head, x_.upstream_cfg_->tls ? "https" : "http",
                  x_.upstream_server_);
  }
  const bool has_body = !x_.client_->body_done();
  const auto generation = ++generation_;
  stream_ = conn_->open_stream(head_, has_body, [weak = x_.self_, generation] {
    if (auto self = weak.lock(); self && generation == self->h2_.generation_) {
      self->h2_.post_progress();
    }
  });
  if (!stream_) {
    // The connection went away as the stream was to open: once more on another.
    if (x_.retried_on_fresh_) return x_.fail(UpstreamError::kConnectionFailed);
    x_.retried_on_fresh_ = true;
    return start();
  }
  body_ = has_body ? BodyRelay::kWaitingForConnection : BodyRelay::kDone;
  response_ = ResponseRelay::kAwaitingHead;
  last_sent_ = false;
  if (!has_body) x_.request_sent();
  touch();
  if (!has_body) x_.host_.awaiting_response(true);
  progress();
}

void H2Leg::post_progress() {
  if (progress_posted_) return;
  progress_posted_ = true;
  post_soon(x_.executor_, handler([generation = generation_](H2Leg& self) {
               self.progress_posted_ = false;
               if (self.x_.leg_ == &self && generation == self.generation_) {
                 self.progress();
               }
             }));
}

// Looks at the stream and moves each relay on as far as it can.
void H2Leg::progress() {
  if (!stream_) return;
  H2Stream& s = *stream_;
  if (s.state == H2Stream::State::kConnectFailed) return connect_failed();
  if (s.state == H2Stream::State::kUnplaced) {
    // Its connection had no room for it after all (the server takes fewer
    // streams than were waiting): nothing of it was sent, it goes elsewhere.
    body_ = BodyRelay::kDone;
    return start();
  }
  if (opened_ && conn_->connected()) {
    // Counted once, by the exchange that opened it.
    opened_ = false;
    x_.pools_.mark_ok(*x_.upstream_cfg_, x_.server_index_);
    x_.pools_.count_connection(*x_.upstream_cfg_);
  }
  if (body_ == BodyRelay::kWaitingForConnection &&
      ((conn_->connected() && s.state != H2Stream::State::kQueued) || s.closed())) {
    start_body();
  }
  if (body_ == BodyRelay::kSending && (!s.piece_pending || s.closed())) {
    // The piece went (or never will: the stream ended).
    if (s.piece_last || s.closed()) {
      body_ = BodyRelay::kDone;
      x_.request_sent();
      if (response_ == ResponseRelay::kAwaitingHead) x_.host_.awaiting_response(true);
    } else {
      touch();
      body_ = BodyRelay::kReading;
      x_.read_client_body();
    }
  }
  if (response_ == ResponseRelay::kAwaitingHead) {
    // A leg that is not full duplex gets the response once the request went.
    const bool may_respond =
        x_.client_->full_duplex() || body_ == BodyRelay::kDone ||
        (s.closed() && body_ != BodyRelay::kReading && body_ != BodyRelay::kContinuing);
    if (s.head_done() && may_respond) return relay_head();
    if (s.closed() && !s.head_done()) return stream_failed();
    return;
  }
  if (response_ == ResponseRelay::kRelaying) relay();
}

// The connection is ready: the body goes (after 100 Continue when the
// client waits for it).
void H2Leg::start_body() {
  body_ = BodyRelay::kReading;
  if (stream_->closed()) {
    body_ = BodyRelay::kDone;
    return;
  }
  if (x_.progress_ == UpstreamExchange::Progress::kContinueOwed) {
    x_.progress_ = UpstreamExchange::Progress::kHeadReady;
    body_ = BodyRelay::kContinuing;
    return x_.client_->send_continue();  // -> on_continue_sent
  }
  x_.read_client_body();
}

// The 100 Continue went (or failed): the body is read, or an end that came
// meanwhile (it waited for the write) happens now.
void H2Leg::on_continue_sent(beast::error_code ec) {
  body_ = BodyRelay::kDone;  // nothing in flight on the client leg
  if (pending_end_) {
    const auto [how, error] = *pending_end_;
    pending_end_.reset();
    return end(how, error);
  }
  if (ec) return x_.abort();
  body_ = BodyRelay::kReading;
  x_.read_client_body();
}

void H2Leg::on_body_read(beast::error_code ec, std::size_t n) {
  if (body_ == BodyRelay::kCancelling) {
    // The read that had to end before the exchange could.
    body_ = BodyRelay::kDone;
    if (pending_end_) {
      const auto [how, error] = *pending_end_;
      pending_end_.reset();
      return end(how, error);
    }
    return progress();
  }
  if (body_ != BodyRelay::kReading) return;
  if (!stream_) {
    // The upstream side was closed for a client that left (close_upstream_socket):
    // the read that failed with it ends the exchange.
    body_ = BodyRelay::kDone;
    return x_.abort();
  }
  if (ec) {
    body_ = BodyRelay::kDone;
    release();
    return x_.end(LegEnd::kRequestBodyFailed, {}, ec);
  }
  const bool last = x_.client_->body_done();
  if (n == 0 && !last) return x_.read_client_body();  // only framing was read
  if (stream_->closed()) {
    // The stream ended while the client was still sending: the rest is not wanted.
    body_ = BodyRelay::kDone;
    return progress();
  }
  body_ = BodyRelay::kSending;
  touch();
  conn_->send_body(*stream_, x_.request_.relay.data(), n, last,
                   last ? x_.client_->request_trailers() : nullptr);
}

// ---- The response -----------------------------------------------------------------

void H2Leg::relay_head() {
  H2Stream& s = *stream_;
  x_.host_.awaiting_response(false);
  x_.upstream_status_ = s.status;
  // The route's policy retries this status, once the whole request went.
  if (body_ == BodyRelay::kDone && x_.retry_answer(s.head)) return;
  x_.note_usage(s.head);
  x_.answered();
  ResponseStart start;
  start.status = s.status;
  start.reason = http::obsolete_reason(static_cast<http::status>(s.status));
  start.fields = &s.head;
  start.content_length = content_length(s.head);
  const bool bodiless =
      x_.request_.method == http::verb::head || s.status == 204 || s.status == 304;
  start.has_body = !bodiless && !(s.whole() && s.data.empty() && !s.has_trailers());
  // An HTTP/1.1 client learns that no body follows from the length (a
  // gRPC Trailers-Only reply says none).
  if (!start.has_body && !bodiless) start.content_length = 0;
  x_.start_response(start);
  if (!start.has_body) {
    // Nothing follows the head (whatever the server sent with it is dropped).
    response_ = ResponseRelay::kSending;
    last_sent_ = true;
    return x_.send_response(nullptr, 0, true);
  }
  response_ = ResponseRelay::kRelaying;
  if (s.data.empty() && !s.whole()) {
    // The head goes at once: a streaming response's first message may be long in coming.
    response_ = ResponseRelay::kSending;
    return x_.send_response(nullptr, 0, false);
  }
  relay();
}

void H2Leg::relay() {
  H2Stream& s = *stream_;
  if (s.data.empty() && !s.whole()) {
    if (s.closed()) {
      // Cut short after its head went: all that can be done is to cut the client's.
      spdlog::warn("upstream {} server {}: HTTP/2 response cut short (code {})",
                   x_.upstream_cfg_->name, x_.upstream_server_, s.error_code);
      return x_.abort();
    }
    return touch();  // waits for DATA
  }
  out_.clear();
  out_.swap(s.data);
  out_owed_ = out_.size();
  last_sent_ = s.whole();
  if (last_sent_ && s.has_trailers()) {
    x_.note_usage_trailers(s.head, s.trailers);
    x_.client_->set_response_trailers(s.trailers);
  }
  response_ = ResponseRelay::kSending;
  x_.send_response(out_.data(), out_.size(), last_sent_);
}

void H2Leg::on_response_sent(beast::error_code ec) {
  if (response_ != ResponseRelay::kSending) return;
  if (ec || !stream_) return x_.abort();
  conn_->consume(*stream_, std::exchange(out_owed_, 0));
  out_.clear();
  if (last_sent_) {
    response_ = ResponseRelay::kDone;
    if (x_.upstream_cfg_->tls) {
      if (auto session = conn_->take_tls_session()) {
        x_.pools_.keep_tls_session(*x_.upstream_cfg_, x_.server_index_, std::move(session));
      }
    }
    return end(LegEnd::kRelayed, {});
  }
  response_ = ResponseRelay::kRelaying;
  touch();
  relay();
}

}  // namespace sluice
