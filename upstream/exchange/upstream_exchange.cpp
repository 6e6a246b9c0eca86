#include "upstream/exchange/upstream_exchange.hpp"

#include <algorithm>
#include <exception>

#include <spdlog/spdlog.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/address.hpp>

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

}  // namespace

void UpstreamExchange::start(const ExchangeRequest& request,
                             const std::shared_ptr<UpstreamExchange>& self) {
  self_ = self;
  request_ = request;
  upstream_cfg_ = request.upstream;
  mode_ = upstream_cfg_->http2() ? Mode::kHttp2 : Mode::kHttp1;
  deadline_at_ = request.deadline.count() > 0 ? Clock::now() + request.deadline
                                               : Clock::time_point::max();
  tried_.clear();
  try_next_server();
}

UpstreamExchange::~UpstreamExchange() {
  h2_release();
}

UpstreamExchange::Clock::duration UpstreamExchange::upstream_timeout(Clock::duration timeout) const {
  if (deadline_at_ == Clock::time_point::max()) return timeout;
  return std::clamp(deadline_at_ - Clock::now(), Clock::duration::zero(), timeout);
}

// ---- Choose, connect ------------------------------------------------------

void UpstreamExchange::try_next_server() {
  auto server = pools_.pick(*upstream_cfg_, tried_);
  if (!server) {
    if (!tried_.empty()) return fail(last_connect_error_);
    // None tried: the servers are in cool-down, or fail their health checks.
    if (!pools_.any_unhealthy(*upstream_cfg_))
      return fail(UpstreamError::kNoServer);
    host_.count_upstream(*upstream_cfg_, UpstreamOutcome::kUnhealthy);
    return fail(UpstreamError::kNoHealthyServer);
  }
  server_index_ = *server;
  tried_.push_back(*server);
  upstream_timed_out_ = false;
  if (mode_ == Mode::kHttp2) return start_h2();
  upstream_ = pools_.take_idle(*upstream_cfg_, *server);
  upstream_reused_ = upstream_ != nullptr;
  if (upstream_) return send_request_head();
  connect_fresh();
}

// A new connection to server_index_, once the server is under its
// max_connections.
void UpstreamExchange::connect_fresh() {
  upstream_reused_ = false;
  upstream_timed_out_ = false;
  upstream_ = pools_.open(*upstream_cfg_, server_index_);
  if (!upstream_) return wait_for_connection();
  const auto& hp = upstream_cfg_->servers[server_index_];
  upstream_->address = hp;
  upstream_->server = hp.to_string();
  beast::error_code ec;
  auto address = asio::ip::make_address(hp.host, ec);
  if (!ec) return connect_to({tcp::endpoint{address, hp.port}});
  resolve(hp);
}

// A host name: resolve it (rare: connections are pooled), within the connect
// deadline.
void UpstreamExchange::resolve(const HostPort& hp) {
  resolver_ = std::make_unique<tcp::resolver>(asio::any_io_executor{executor_});
  resolve_timer_ = std::make_unique<asio::steady_timer>(
      asio::any_io_executor{executor_}, upstream_cfg_->connect_timeout);
  resolve_timer_->async_wait(handler([](UpstreamExchange& self, beast::error_code ec) {
    if (!ec && self.resolver_) self.resolver_->cancel();
  }));
  resolver_->async_resolve(hp.host, std::to_string(hp.port),
                           handler([](UpstreamExchange& self, beast::error_code ec,
                                      tcp::resolver::results_type results) {
                             const bool timed_out = ec == asio::error::operation_aborted &&
                                                    self.resolve_timer_->expiry() <=
                                                        asio::steady_timer::clock_type::now();
                             self.resolve_timer_->cancel();
                             if (!self.upstream_) return;  // dropped meanwhile
                             // Closed meanwhile: nothing goes upstream.
                             if (self.host_.client_closed()) return self.abort();
                             if (timed_out) return self.on_connect(beast::error::timeout);
                             if (ec) return self.on_connect(ec);
                             std::vector<tcp::endpoint> endpoints;
                             for (const auto& r : results) endpoints.push_back(r.endpoint());
                             self.connect_to(std::move(endpoints));
                           }));
}

// The server has max_connections already: wait up to connect_timeout for one
// of them to close or come back idle, then answer 503.
void UpstreamExchange::wait_for_connection() {
  const auto generation = ++slot_generation_;
  waiting_for_slot_ = true;
  if (!slot_timer_) slot_timer_ = std::make_unique<Timer>(executor_);
  // One deadline per exchange, however often a woken request loses its turn.
  if (slot_deadline_ == Clock::time_point{}) {
    slot_deadline_ = Clock::now() + upstream_cfg_->connect_timeout;
  }
  slot_timer_->expires_at(slot_deadline_);
  slot_timer_->async_wait(handler([generation](UpstreamExchange& self, beast::error_code ec) {
    if (generation != self.slot_generation_ || !self.waiting_for_slot_) return;
    if (ec) {
      // Cancelled for a client that left: the exchange ends (as aborted).
      if (self.host_.client_closed()) {
        self.waiting_for_slot_ = false;
        self.abort();
      }
      return;
    }
    self.waiting_for_slot_ = false;
    self.host_.count_upstream(*self.upstream_cfg_, UpstreamOutcome::kConnectionLimit);
    self.fail(UpstreamError::kConnectionLimit);
  }));
  pools_.wait_for_slot(*upstream_cfg_, server_index_,
                       [weak = self_, generation](bool take) -> bool {
                         auto self = weak.lock();
                         if (!self) return false;
                         return take ? self->take_slot(generation) : self->waits(generation);
                       });
}

// A connection to the server closed or came back idle: this request takes
// it, unless it gave up waiting.
bool UpstreamExchange::waits(std::uint64_t generation) const {
  return !host_.client_closed() && generation == slot_generation_ && waiting_for_slot_;
}

bool UpstreamExchange::take_slot(std::uint64_t generation) {
  if (!waits(generation)) return false;
  waiting_for_slot_ = false;
  slot_timer_->cancel();
  try {
    if (mode_ == Mode::kHttp2) {
      start_h2();
      return true;
    }
    upstream_ = pools_.take_idle(*upstream_cfg_, server_index_);
    upstream_reused_ = upstream_ != nullptr;
    if (upstream_) {
      send_request_head();
    } else {
      connect_fresh();
    }
  } catch (const std::exception& e) {
    on_internal_error(e.what());
    guarded_detail::reported = false;  // handled here, not by run_guarded
  }
  return true;
}

void UpstreamExchange::connect_to(std::vector<tcp::endpoint> endpoints) {
  host_.set_deadline(Side::kUpstream, upstream_timeout(upstream_cfg_->connect_timeout));
  upstream_->stream.tcp().async_connect(
      endpoints, upstream_handler([](UpstreamExchange& self, beast::error_code ec,
                                     const tcp::endpoint&) { self.on_connect(ec); }));
}

void UpstreamExchange::on_connect(beast::error_code ec) {
  if (ec == asio::error::operation_aborted && (host_.draining() || host_.client_closed())) {
    // Closed by a drain timeout or for a client that left, not by the
    // server: no cool-down, no retry.
    return abort();
  }
  if (ec) {
    const bool timed_out = ec == beast::error::timeout || upstream_timed_out_;
    return connect_failed("connect", ec.message(),
                          timed_out ? UpstreamOutcome::kTimeout : UpstreamOutcome::kConnectError,
                          connect_error(timed_out));
  }
  pools_.mark_ok(*upstream_cfg_, server_index_);
  host_.count_connection(*upstream_cfg_);
  beast::error_code ignored;
  upstream_->stream.socket().set_option(tcp::no_delay(true), ignored);
  if (upstream_cfg_->tls) return start_tls();
  send_request_head();
}

// TLS to the server, within what is left of connect_timeout: SNI and the
// name verified, resuming the server's last session when there is one.
void UpstreamExchange::start_tls() {
  const UpstreamTls& tls = *upstream_cfg_->tls;
  TlsSocket& session =
      upstream_->stream.use_tls(tls.context(), upstream_cfg_->tls, TlsSocket::Role::kClient);
  upstream_->tls = &tls;
  const TlsSessionRef resume = pools_.tls_session(*upstream_cfg_, server_index_);
  if (!tls.prepare(session.native_handle(), upstream_->address.host, resume.get())) {
    // A server host OpenSSL cannot check a certificate against: never unverified.
    return on_tls_handshake(make_error_code(boost::system::errc::invalid_argument));
  }
  upstream_->stream.tls().async_handshake(upstream_handler(
      [](UpstreamExchange& self, beast::error_code ec) { self.on_tls_handshake(ec); }));
}

void UpstreamExchange::on_tls_handshake(beast::error_code ec) {
  if (!ec) return send_request_head();
  // Cut by a drain or by a client that left: not the server's failure.
  if (ec == asio::error::operation_aborted && !upstream_timed_out_ &&
      (host_.draining() || host_.client_closed())) {
    return abort();
  }
  if (upstream_timed_out_) {
    return connect_failed("TLS handshake", "timed out", UpstreamOutcome::kTimeout,
                          UpstreamError::kConnectTimedOut);
  }
  connect_failed(
      "TLS handshake",
      UpstreamTls::failure_reason(upstream_->stream.tls_session().native_handle(), ec.message()),
      UpstreamOutcome::kTlsError, UpstreamError::kTlsFailed);
}

// A connect or TLS handshake that failed sent nothing of the request: it is
// logged and counted, the server goes into cool-down, and the retry rule may
// send the request to the next server; else the client gets `error`.
void UpstreamExchange::connect_failed(std::string_view what, const std::string& reason,
                                      UpstreamOutcome outcome, UpstreamError error) {
  spdlog::warn("upstream {} server {}: {} failed: {}", upstream_cfg_->name,
               upstream_ ? upstream_->server : "?", what, reason);
  host_.count_upstream(*upstream_cfg_, outcome);
  pools_.mark_failed(*upstream_cfg_, server_index_);
  drop_upstream();
  last_connect_error_ = error;
  FailedAttempt attempt;
  attempt.stage = FailedAttempt::Stage::kConnect;
  attempt.idempotent = is_idempotent(request_.method);
  attempt.servers_tried = tried_.size();
  if (retry_rule(attempt) == Retry::kNextServer) return try_next_server();
  fail(error);
}

// The session of a TLS connection that served a whole exchange, for the next
// connection to the server to resume: once per connection (its first exchange
// has read the server's session tickets).
void UpstreamExchange::keep_tls_session() {
  if (upstream_->tls_session_kept) return;
  if (!UpstreamTls::same(upstream_->tls, upstream_cfg_->tls.get())) return;  // a reload's
  upstream_->tls_session_kept = true;
  if (auto session = resumable_session(upstream_->stream.tls_session().native_handle())) {
    pools_.keep_tls_session(*upstream_cfg_, server_index_, std::move(session));
  }
}

// ---- Deadlines and failures -----------------------------------------------

void UpstreamExchange::on_upstream_deadline() {
  if (mode_ == Mode::kHttp2) return on_h2_deadline();
  if (!upstream_) return;
  upstream_timed_out_ = true;
  beast::error_code ignored;
  upstream_->stream.socket().close(ignored);
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
    host_.count_upstream(*upstream_cfg_, UpstreamOutcome::kTlsError);
    drop_upstream();
    return fail(UpstreamError::kTlsFailed);
  }
  const bool timed_out = ec == beast::error::timeout || upstream_timed_out_;
  if (retry_rule(failed_exchange(ec, timed_out)) == Retry::kFreshConnection) {
    // A pooled connection the server had closed: nothing of this request
    // was answered, so it goes once more on a new connection.
    host_.count_retry();
    drop_upstream();
    retried_on_fresh_ = true;
    return connect_fresh();
  }
  spdlog::warn("upstream {} server {}: {}", upstream_cfg_->name,
               upstream_ ? upstream_->server : "?", ec.message());
  host_.count_upstream(*upstream_cfg_,
                       timed_out ? UpstreamOutcome::kTimeout : UpstreamOutcome::kReset);
  drop_upstream();
  fail(exchange_error(timed_out));
}

// What the retry rule needs to know of an exchange that failed with `ec`.
FailedAttempt UpstreamExchange::failed_exchange(beast::error_code ec, bool timed_out) const {
  FailedAttempt a;
  a.stage = FailedAttempt::Stage::kExchange;
  a.idempotent = is_idempotent(request_.method);
  a.servers_tried = tried_.size();
  a.timed_out = timed_out;
  a.closed_by_server = ec == http::error::end_of_stream || ec == asio::error::eof ||
                       ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
  a.pooled_connection = upstream_reused_ && upstream_ != nullptr;
  a.retried_on_fresh = retried_on_fresh_;
  a.body_empty = request_.body_empty;
  a.response_started =
      (upstream_ && upstream_->buffer.size() > 0) || (res_parser_ && res_parser_->got_some());
  return a;
}

void UpstreamExchange::abort() {
  drop_upstream();
  if (mode_ == Mode::kHttp2) return h2_end(ExchangeResult::End::kAborted);
  end(ExchangeResult::End::kAborted);
}

void UpstreamExchange::end(ExchangeResult::End how, UpstreamError error, beast::error_code ec) {
  ExchangeResult result;
  result.end = how;
  result.status = upstream_status_;
  result.error = error;
  result.body_error = ec;
  result.client_keep_alive = how == ExchangeResult::End::kRelayed && client_.keeps_client();
  result.upstream_reused = upstream_reused_;
  mode_ = Mode::kIdle;  // what the client leg completes after this is not the exchange's
  host_.exchange_ended(result);
}

void UpstreamExchange::close_upstream_socket() {
  if (tunnel_) tunnel_->stop();
  if (mode_ == Mode::kHttp2 && h2_) {
    // Nothing more goes to or comes from the server. A body read or a
    // response piece in flight on the client leg fails and ends the
    // exchange; otherwise it ends here, as aborted.
    const bool leg_busy = h2_request_ == H2Request::kReading ||
                          h2_request_ == H2Request::kContinuing ||
                          h2_response_ == H2Response::kSending;
    h2_release();
    if (!leg_busy) {
      asio::post(executor_, handler([generation = h2_generation_](UpstreamExchange& self) {
                   if (self.mode_ == Mode::kHttp2 && generation == self.h2_generation_) {
                     self.abort();
                   }
                 }));
    }
    return;
  }
  if (resolver_) resolver_->cancel();  // a name being resolved is not connected to
  if (!upstream_) return;
  beast::error_code ignored;
  upstream_->stream.socket().close(ignored);
}

void UpstreamExchange::drop_upstream() {
  if (tunnel_) tunnel_->stop();
  h2_release();
  if (!upstream_) return;
  beast::error_code ignored;
  upstream_->stream.socket().close(ignored);
  if (upstream_busy_) {
    // Its operation, aborted by the close, still uses the stream, the buffer
    // and (a read) the response parser: they go when that operation has
    // ended. A read that had already completed is still to be parsed: the
    // parser gets no relay buffer to write its body to.
    upstream_busy_ = false;
    if (res_parser_) {
      auto& body = res_parser_->get().body();
      body.data = nullptr;
      body.size = 0;
    }
    dropped_.push_back({upstream_generation_++, std::move(upstream_), res_parser_.release()});
    return;
  }
  upstream_.reset();
}

void UpstreamExchange::release_dropped(std::uint64_t generation) {
  std::erase_if(dropped_, [generation](const Dropped& d) { return d.generation == generation; });
}

void UpstreamExchange::cancel_wait() {
  if (slot_timer_) slot_timer_->cancel();
}

void UpstreamExchange::reset() {
  h2_release();
  h2_pending_end_.reset();
  h2_head_.reset();
  if (h2_out_.capacity() > 64 * 1024) std::string().swap(h2_out_);
  res_parser_.reset();
  usage_.reset();
  relay_ = {};  // the host may take its relay buffer back
  upstream_status_ = 0;
  upstream_server_.clear();
  upstream_reusable_ = false;
  progress_ = Progress::kNew;
  last_connect_error_ = UpstreamError::kConnectFailed;
  upstream_reused_ = false;
  retried_on_fresh_ = false;
  slot_deadline_ = {};
}

}  // namespace sluice
