// How an HTTP/2 attempt ends (a failed stream or connection goes by the retry
// rule; the end waits for the client leg's operation in flight), the wait
// for the upstream (its own timer: response_timeout between upstream events,
// bounded by the request's deadline, so that the host's one deadline stays
// the client's), and letting go of the stream.
#include <utility>

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "common/guarded.hpp"
#include "common/soon.hpp"
#include "upstream/exchange/h2_leg.hpp"
#include "upstream/exchange/upstream_exchange.hpp"
#include "upstream/h2/h2_connection.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;

}  // namespace

// ---- Failures -----------------------------------------------------------------------

// The stream ended before a response head came.
void H2Leg::stream_failed() {
  const H2Stream& s = *stream_;
  if (x_.host_.client_closed() && !x_.upstream_timed_out_) return x_.abort();
  if (s.state == H2Stream::State::kTlsAlert) {
    // A TLS alert after the handshake (a refused client certificate under
    // TLS 1.3; the connection logged its reason): a TLS failure.
    x_.note_attempt(UpstreamOutcome::kTlsError);
    release();
    return end(LegEnd::kUpstreamFailed, UpstreamError::kTlsFailed);
  }
  // Refused (RST_STREAM REFUSED_STREAM, or a GOAWAY whose last-stream-id is
  // below it: nghttp2 closes those as refused): the server did not process
  // it, so it may go again whatever its method, if none of its body was read
  // (it cannot be read twice).
  const bool body_untouched = x_.request_.body_empty || body_ == BodyRelay::kWaitingForConnection;
  FailedAttempt attempt = x_.attempt(FailedAttempt::Stage::kExchange);
  attempt.refused = s.error_code == NGHTTP2_REFUSED_STREAM && body_untouched;
  attempt.refused_before = x_.h2_refused_;
  attempt.closed_by_server = s.connection_broke();
  attempt.pooled_connection = x_.upstream_reused_;
  attempt.retried_on_fresh = x_.retried_on_fresh_;
  attempt.body_empty = x_.request_.body_empty;
  const Retry retry = body_untouched ? retry_rule(attempt) : Retry::kNo;
  if (retry == Retry::kAnotherStream || retry == Retry::kFreshConnection) {
    body_ = BodyRelay::kDone;
    return x_.retry(retry);  // -> start()
  }
  spdlog::warn(
      "upstream {} server {}: HTTP/2 stream ended before a response head ({})",
      x_.upstream_cfg_->name, x_.upstream_server_,
      s.connection_broke() ? "the connection failed" : nghttp2_http2_strerror(s.error_code));
  x_.note_attempt(s.error_code == NGHTTP2_PROTOCOL_ERROR ? UpstreamOutcome::kProtocolError
                                                            : UpstreamOutcome::kReset,
                  !s.connection_broke() || s.reports_failure);
  release();
  x_.upstream_status_ = 0;
  if (client_idle() && x_.retry_by_policy(RetryCause::kReset)) {
    body_ = BodyRelay::kDone;
    return;
  }
  end(LegEnd::kUpstreamFailed, UpstreamError::kConnectionFailed);
}

// The connection never became ready: like a failed connect, the server
// goes into cool-down and the request may go to the next one.
void H2Leg::connect_failed() {
  const H2ConnectFailure failure = stream_->connect_failure;
  x_.note_attempt(failure.outcome, stream_->reports_failure);
  x_.pools_.mark_failed(*x_.upstream_cfg_, x_.server_index_);
  release();
  x_.last_connect_error_ = failure.error;
  if (client_idle() && x_.retry_by_policy(RetryCause::kConnectFailure)) {
    body_ = BodyRelay::kDone;
    return;
  }
  if (body_ != BodyRelay::kReading && !x_.policy_owns(RetryCause::kConnectFailure) &&
      retry_rule(x_.attempt(FailedAttempt::Stage::kConnect)) == Retry::kNextServer) {
    body_ = BodyRelay::kDone;
    return x_.retry(Retry::kNextServer);
  }
  end(LegEnd::kUpstreamFailed, failure.error);
}

void H2Leg::end(LegEnd how, UpstreamError error) {
  if (body_ == BodyRelay::kContinuing) {
    // The 100 Continue's write must end first (on_continue_sent).
    pending_end_ = {how, error};
    return;
  }
  if (body_ == BodyRelay::kReading || body_ == BodyRelay::kCancelling) {
    // The client leg's read must end first; the exchange ends with it.
    pending_end_ = {how, error};
    if (body_ == BodyRelay::kReading) {
      body_ = BodyRelay::kCancelling;
      x_.client_->cancel_read();
    }
    return;
  }
  release();
  x_.end(how, error);
}

// ---- The wait for the upstream ------------------------------------------------------

// The upstream has response_timeout (to the request's deadline) from now for
// its next event: the leg's deadline on its connection's sweep, moved later
// at no cost.
void H2Leg::touch() {
  const auto timeout = x_.upstream_timeout(x_.response_timeout());
  // A leg that is not full duplex has one deadline (HTTP/1.1): while it
  // does nothing the wait is the upstream's, not its last read's or write's.
  if (!x_.client_->full_duplex() && body_ != BodyRelay::kReading &&
      response_ != ResponseRelay::kSending) {
    x_.host_.set_deadline(Side::kUpstream, timeout);
  }
  if (!conn_) return;
  if (!keep_) keep_ = x_.self_.lock();
  conn_->deadlines().expires_after(*this, timeout, *conn_);
}

void H2Leg::deadline_passed() noexcept {
  const auto keep = x_.self_.lock();  // the leg's exchange, through the call
  if (!keep) return;
  call_guarded(x_, false, [this] {
    on_timer();
    return true;
  });
}

void H2Leg::on_timer() {
  if (x_.leg_ != this || !stream_) return let_go_of_exchange();
  const bool deadline_passed = x_.deadline_at_ <= Clock::now();
  if (response_ == ResponseRelay::kSending && !deadline_passed) {
    // A client slow to take the response is its leg's business (send_timeout).
    conn_->deadlines().expires_after(*this, x_.response_timeout(), *conn_);
    return;
  }
  x_.upstream_timed_out_ = true;
  spdlog::warn("upstream {} server {}: no HTTP/2 response in time", x_.upstream_cfg_->name,
               x_.upstream_server_);
  // Is it this stream, or the server? (A server that answers nothing loses the connection.)
  if (conn_ && !deadline_passed) conn_->probe();
  if (x_.progress_ == UpstreamExchange::Progress::kResponseStarted) return x_.abort();
  x_.note_attempt(UpstreamOutcome::kTimeout);
  release();
  if (client_idle() && x_.retry_by_policy(RetryCause::kTimeout)) {
    body_ = BodyRelay::kDone;
    return;
  }
  end(LegEnd::kUpstreamFailed, UpstreamError::kResponseTimedOut);
}

void H2Leg::on_deadline() {
  if (!stream_) return;
  on_timer();
}

// Lets go of the stream (reset if still open) and of the connection.
void H2Leg::release() {
  clear_deadline();
  // A connection closed under the leg stops its timer once no leg waits on it.
  if (conn_ && conn_->is_closed()) conn_->deadlines().stop_if_idle();
  // A piece the client leg did not finish taking is still given back to the
  // connection's window (its bytes stay in out_ while the leg may read them).
  if (stream_ && conn_) conn_->consume(*stream_, std::exchange(out_owed_, 0));
  out_owed_ = 0;
  if (stream_ && conn_) conn_->release(*stream_);
  stream_.reset();
  conn_.reset();
  ++generation_;
  let_go_of_exchange();
}

// After the handler running now (which holds the exchange as the leg's own
// caller does): the exchange may end with this reference.
void H2Leg::let_go_later() {
  post_soon(x_.executor_, [keep = std::move(keep_)] {});
}

// ---- The leg's part of the exchange -------------------------------------------------

void H2Leg::close() {
  if (!stream_) return;
  // Nothing more goes to or comes from the server. A body read or a
  // response piece in flight on the client leg fails and ends the
  // exchange; otherwise it ends here, as aborted.
  const bool leg_busy = body_ == BodyRelay::kReading || body_ == BodyRelay::kContinuing ||
                        response_ == ResponseRelay::kSending;
  release();
  if (!leg_busy) {
    post_soon(x_.executor_, handler([generation = generation_](H2Leg& self) {
                 if (self.x_.leg_ == &self && generation == self.generation_) self.x_.abort();
               }));
  }
}

void H2Leg::reset() {
  release();
  pending_end_.reset();
  head_.clear();
  if (out_.capacity() > 64 * 1024) std::string().swap(out_);
}

}  // namespace sluice
