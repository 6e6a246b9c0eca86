// UpstreamExchange: the request's start and deadline, what its legs share
// (the request head, the relay buffer, the usage header), the retry rule
// applied, and the end. Choosing a server and connecting: upstream_connect.cpp.
#include "upstream/exchange/upstream_exchange.hpp"

#include <algorithm>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/ascii.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// The legs name the ends as ExchangeResult does.
constexpr bool same_end(LegEnd leg, ExchangeResult::End result) {
  return static_cast<int>(leg) == static_cast<int>(result);
}
static_assert(same_end(LegEnd::kRelayed, ExchangeResult::End::kRelayed) &&
              same_end(LegEnd::kUpstreamFailed, ExchangeResult::End::kUpstreamFailed) &&
              same_end(LegEnd::kRequestBodyFailed, ExchangeResult::End::kRequestBodyFailed) &&
              same_end(LegEnd::kAborted, ExchangeResult::End::kAborted));

}  // namespace

void UpstreamExchange::start(const ExchangeRequest& request,
                             const std::shared_ptr<UpstreamExchange>& self) {
  self_ = self;
  request_ = request;
  upstream_cfg_ = request.upstream;
  facts_ = ExchangeFacts{};
  facts_.upstream = upstream_cfg_;
  leg_ = upstream_cfg_->http2() ? static_cast<UpstreamLeg*>(&h2_) : &http1_;
  deadline_at_ =
      request.deadline.count() > 0 ? Clock::now() + request.deadline : Clock::time_point::max();
  tried_.clear();
  attempts_.clear();
  policy_retries_ = 0;
  client_ = &real_client_;
  // A WebSocket handshake is never retried (and its tunnel outlives the exchange).
  std::size_t keep = request.keep_body;
  retry_keeps_body_ = false;
  if (const RetryPolicy* policy = request.retry; policy && !request.websocket) {
    budget_ = &pools_.retry_budget(*upstream_cfg_);
    budget_->request_started();
    // The body is kept only for a request that may go again.
    if (policy->non_idempotent || is_idempotent(request.method)) {
      keep = std::max(keep, policy->max_replay_bytes);
      retry_keeps_body_ = true;
    }
  }
  if (read_ahead_) {
    // The body read ahead goes first. Beyond it, the body is kept only as a
    // retry or a mirror needs it (a longer read frees what was kept).
    read_ahead_ = false;
    replay_.extend(std::max(keep, replay_.kept().size()));
    // Freed once replayed when kept for nothing else (a retry, a mirror).
    replay_.replaying_read_ahead(keep == 0 && !retry_keeps_body_);
    replay_.rewind();
    client_ = &replay_;
  } else if (keep > 0 || retry_keeps_body_) {
    replay_.arm(real_client_, keep);
    client_ = &replay_;
  }
  try_next_server();
}

void UpstreamExchange::read_ahead(std::span<char> relay, std::size_t max_bytes) {
  request_.relay = relay;
  read_ahead_max_ = max_bytes;
  replay_.arm(real_client_, max_bytes);
  client_ = &replay_;
  reading_ahead_ = true;
  if (!real_client_.body_done() && real_client_.expects_continue()) {
    replay_.continue_sent();
    return real_client_.send_continue();  // -> on_continue_sent
  }
  read_ahead_step({});
}

void UpstreamExchange::read_ahead_step(beast::error_code ec) {
  const std::size_t kept = replay_.kept().size();
  // (Past its connection's budget a request is decided on what it read.)
  if (ec || real_client_.body_done() || kept >= read_ahead_max_ || host_.read_ahead_room() == 0) {
    reading_ahead_ = false;
    read_ahead_ = !ec;
    return host_.read_ahead_done(ec);
  }
  const std::size_t room = host_.read_ahead_room();
  real_client_.read_body(
      request_.relay.first(std::min({request_.relay.size(), read_ahead_max_ - kept, room})));
}

// (The retry budget is not touched here: an exchange destroyed with its
// worker's pending handlers outlives the pools the budget lives in.)
UpstreamExchange::~UpstreamExchange() {
  h2_.release();
}

UpstreamExchange::Clock::duration UpstreamExchange::upstream_timeout(
    Clock::duration timeout) const {
  // An attempt under a per-try timeout waits for its response head until then.
  const Clock::time_point until = std::min(deadline_at_, attempt_deadline_);
  if (until == Clock::time_point::max()) return timeout;
  return std::clamp(until - Clock::now(), Clock::duration::zero(), timeout);
}

void UpstreamExchange::on_upstream_deadline() {
  if (backing_off_) return;  // between attempts
  if (leg_) return leg_->on_deadline();
  http1_.on_deadline();
}

// ---- What the legs share ---------------------------------------------------

// The head is written once (a retry after a failed connect reuses it).
bool UpstreamExchange::begin_request() {
  if (progress_ != Progress::kNew) return false;
  progress_ = !client_->body_done() && client_->expects_continue() ? Progress::kContinueOwed
                                                                 : Progress::kHeadReady;
  return true;
}

void UpstreamExchange::read_client_body() {
  client_->read_body(request_.relay);
}

void UpstreamExchange::note_attempt(UpstreamOutcome outcome, bool to_server) {
  facts_.attempt(outcome);
  if (!attempts_.empty() && !attempts_.back().ended) {
    AttemptRecord& attempt = attempts_.back();
    attempt.ended = true;
    attempt.ended_at = Clock::now();
    attempt.outcome = outcome;
    attempt.status = outcome == UpstreamOutcome::kOk ? upstream_status_ : 0;
  }
  if (!to_server || !upstream_cfg_->outlier_detection || outcome == UpstreamOutcome::kUnhealthy ||
      outcome == UpstreamOutcome::kConnectionLimit) {
    return;  // no server's doing
  }
  // A deadline the request brought (timeout_ms, grpc-timeout) says nothing
  // of the server: a client could otherwise eject servers with short ones.
  if (outcome == UpstreamOutcome::kTimeout && deadline_at_ != Clock::time_point::max() &&
      Clock::now() >= deadline_at_) {
    return;
  }
  if (!request_.counts_for_servers) return;  // a mirror's copy
  AttemptResult result = AttemptResult::kGatewayError;
  if (outcome == UpstreamOutcome::kOk) {
    const bool gateway = upstream_status_ >= 502 && upstream_status_ <= 504;
    result = gateway                    ? AttemptResult::kGatewayError
             : upstream_status_ >= 500 ? AttemptResult::kServerError
                                       : AttemptResult::kSuccess;
  }
  pools_.record_attempt(*upstream_cfg_, server_index_, result);
}

void UpstreamExchange::answered() {
  attempt_deadline_ = Clock::time_point::max();  // per_try_timeout bounds the wait for the head
  note_attempt(UpstreamOutcome::kOk);
  host_.response_started();
}

namespace {

// How often `name` is among `fields`, up to 2, and the first one's value: one
// walk of the fields in order, comparing a name's letters only when its
// length matches (a response's few fields cost less so than a search of
// Beast's case-insensitive index).
std::pair<int, std::string_view> find_usage(const HttpFields& fields, std::string_view name) {
  int n = 0;
  std::string_view first;
  for (const auto& field : fields) {
    const std::string_view field_name = field.name_string();
    if (field_name.size() != name.size() || !ascii::iequals(field_name, name)) continue;
    if (n++ == 1) return {2, first};
    first = field.value();
  }
  return {n, first};
}

}  // namespace

void UpstreamExchange::note_usage(const HttpFields& fields) {
  if (request_.usage_header.empty()) return;
  const auto [n, value] = find_usage(fields, request_.usage_header);
  if (n == 0) return;
  usage_ = n > 1 ? std::string() : std::string(value);  // repeated: invalid
}

void UpstreamExchange::note_usage_trailers(const HttpFields& head, const HttpFields& trailers) {
  if (request_.usage_header.empty()) return;
  const auto [in_head, head_value] = find_usage(head, request_.usage_header);
  const auto [in_trailers, trailer_value] = find_usage(trailers, request_.usage_header);
  if (in_head + in_trailers == 0) return;
  if (in_head + in_trailers > 1) {
    usage_ = std::string();  // repeated: invalid
    return;
  }
  usage_ = std::string(in_head ? head_value : trailer_value);
}

void UpstreamExchange::start_response(const ResponseStart& start) {
  if (BodyObserver* observer = request_.observer; observer && start.fields) {
    const auto value = [&](http::field name) {
      const auto it = start.fields->find(name);
      return it == start.fields->end() ? std::string_view() : std::string_view(it->value());
    };
    observer->response_head(start.status, value(http::field::content_type),
                            value(http::field::content_encoding));
  }
  client_->start_response(start);
}

void UpstreamExchange::send_response(const char* data, std::size_t n, bool last) {
  progress_ = Progress::kResponseStarted;
  if (BodyObserver* observer = request_.observer) {
    if (n > 0) observer->response_body({data, n});
    if (last) observer->response_end();
  }
  client_->send_response(data, n, last);
}

// ---- The retry rule --------------------------------------------------------

FailedAttempt UpstreamExchange::attempt(FailedAttempt::Stage stage) const {
  FailedAttempt a;
  a.stage = stage;
  a.idempotent = is_idempotent(request_.method);
  a.servers_tried = tried_.size();
  return a;
}

void UpstreamExchange::retry(Retry how) {
  if (how == Retry::kNextServer) return try_next_server();
  // The same server once more: on a new connection (one the server had
  // closed under a pooled request), or on another stream (a refused one).
  ++facts_.retries;
  // The attempt given up (a pooled connection the server had closed, a
  // refused stream) ended as a reset.
  const auto now = Clock::now();
  if (!attempts_.empty() && !attempts_.back().ended) {
    attempts_.back().ended = true;
    attempts_.back().ended_at = now;
    attempts_.back().outcome = UpstreamOutcome::kReset;
  }
  attempts_.push_back({.server = server_index_, .started = now});
  if (how == Retry::kAnotherStream) {
    ++h2_refused_;  // where a stream can be taken (H2Leg::start)
  } else {
    retried_on_fresh_ = true;
  }
  if (leg_ == &h2_) return h2_.start();
  connect_fresh();
}

void UpstreamExchange::io_failed(beast::error_code ec) {
  // Closed for a client that left (aborted, or a write after the close): not
  // the server's failure.
  if (!upstream_timed_out_ && host_.client_closed()) return abort();
  if (ByteStream::tls_alert(ec)) {
    // A TLS alert after the handshake (under TLS 1.3 a server that refuses
    // the client certificate says so only then): a TLS failure, as a failed
    // handshake is, with OpenSSL's reason.
    spdlog::warn("upstream {} server {}: TLS failed: {}", upstream_cfg_->name,
                 upstream_ ? upstream_->server : "?", ec.message());
    note_attempt(UpstreamOutcome::kTlsError);
    drop_upstream();
    return fail(UpstreamError::kTlsFailed);
  }
  const bool timed_out = ec == beast::error::timeout || upstream_timed_out_;
  if (const Retry how = retry_rule(failed_exchange(ec, timed_out)); how != Retry::kNo) {
    // A pooled connection the server had closed: nothing of this request
    // was answered, so it goes once more on a new connection.
    drop_upstream();
    return retry(how);
  }
  spdlog::warn("upstream {} server {}: {}", upstream_cfg_->name,
               upstream_ ? upstream_->server : "?", ec.message());
  note_attempt(timed_out ? UpstreamOutcome::kTimeout : UpstreamOutcome::kReset);
  drop_upstream();
  if (retry_by_policy(timed_out ? RetryCause::kTimeout : RetryCause::kReset)) return;
  fail(exchange_error(timed_out));
}

// What the retry rule needs to know of an exchange that failed with `ec`.
FailedAttempt UpstreamExchange::failed_exchange(beast::error_code ec, bool timed_out) const {
  FailedAttempt a = attempt(FailedAttempt::Stage::kExchange);
  a.timed_out = timed_out;
  a.closed_by_server = ec == http::error::end_of_stream || ec == asio::error::eof ||
                       ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
  a.pooled_connection = upstream_reused_ && upstream_ != nullptr;
  a.retried_on_fresh = retried_on_fresh_;
  a.body_empty = request_.body_empty;
  a.response_started = http1_.response_started();
  return a;
}

// ---- The end ---------------------------------------------------------------

void UpstreamExchange::abort() {
  drop_upstream();
  if (leg_) return leg_->end(LegEnd::kAborted, {});
  end(LegEnd::kAborted);
}

void UpstreamExchange::end(LegEnd how, UpstreamError error, beast::error_code ec) {
  ExchangeResult result;
  result.end = static_cast<ExchangeResult::End>(how);
  result.status = upstream_status_;
  result.error = error;
  result.body_error = ec;
  result.client_keep_alive = how == LegEnd::kRelayed && client_->keeps_client();
  result.upstream_reused = upstream_reused_;
  in_flight_.release();
  leave_retry_budget();
  leg_ = nullptr;  // what the client leg completes after this is not the exchange's
  host_.exchange_ended(result);
}

void UpstreamExchange::close_upstream_socket() {
  if (backing_off_) {
    backoff_timer_->cancel();  // between attempts: the wait ends, and the exchange with it
    return;
  }
  if (leg_) return leg_->close();
  http1_.close();
}

void UpstreamExchange::drop_upstream() {
  http1_.release();
  h2_.release();
  if (!upstream_) return;
  beast::error_code ignored;
  upstream_->stream.socket().close(ignored);
  if (upstream_busy_) {
    // Its operation, aborted by the close, still uses the stream, the buffer
    // and (a read) the response parser: they go when that operation has
    // ended. A read that had already completed is still to be parsed: the
    // parser gets no relay buffer to write its body to.
    upstream_busy_ = false;
    dropped_.push_back({upstream_generation_++, std::move(upstream_), http1_.take_parser()});
    return;
  }
  upstream_.reset();
}

void UpstreamExchange::release_dropped(std::uint64_t generation) {
  std::erase_if(dropped_, [generation](const Dropped& d) { return d.generation == generation; });
}

void UpstreamExchange::cancel_wait() {
  if (slot_.timer) slot_.timer->cancel();
  if (backing_off_) backoff_timer_->cancel();  // the client left: the exchange ends
}

void UpstreamExchange::reset() {
  in_flight_.release();
  leave_retry_budget();
  if (backing_off_) {
    backing_off_ = false;
    ++backoff_generation_;  // its handler does nothing
    backoff_timer_->cancel();
  }
  tried_.clear();
  attempts_.clear();
  policy_retries_ = 0;
  if (client_ == &replay_) replay_.disarm();
  client_ = &real_client_;
  host_.read_ahead_released();  // (what the request still held of its connection's budget)
  reading_ahead_ = false;
  read_ahead_ = false;
  attempt_deadline_ = Clock::time_point::max();
  h2_.reset();
  http1_.reset();
  usage_.reset();
  request_.relay = {};  // the host may take its relay buffer back
  facts_ = ExchangeFacts{};
  upstream_status_ = 0;
  upstream_server_.clear();
  progress_ = Progress::kNew;
  last_connect_error_ = UpstreamError::kConnectFailed;
  upstream_reused_ = false;
  retried_on_fresh_ = false;
  h2_refused_ = 0;
  slot_.deadline = {};
}

}  // namespace sluice
