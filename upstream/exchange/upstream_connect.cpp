// UpstreamExchange: choosing a server, waiting for a connection slot at it,
// and connecting (resolving a host name if need be, TLS with session
// resumption) within connect_timeout; a failed connect goes by the retry rule.
#include <algorithm>
#include <exception>

#include <spdlog/spdlog.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/address.hpp>

#include "upstream/exchange/upstream_exchange.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

}  // namespace

// ---- Choose, connect ------------------------------------------------------

void UpstreamExchange::try_next_server() {
  in_flight_.release();  // the last attempt's server has it no more
  auto server = pools_.pick(*upstream_cfg_, tried_, request_.hash_key);
  if (!server) {
    if (!tried_.empty()) return fail(last_connect_error_);
    // None tried: the servers are in cool-down, or fail their health checks.
    if (!pools_.any_unhealthy(*upstream_cfg_)) return fail(UpstreamError::kNoServer);
    note_attempt(UpstreamOutcome::kUnhealthy);
    return fail(UpstreamError::kNoHealthyServer);
  }
  start_attempt(*server);
}

void UpstreamExchange::start_attempt(std::size_t server) {
  server_index_ = server;
  if (std::find(tried_.begin(), tried_.end(), server) == tried_.end()) tried_.push_back(server);
  attempts_.push_back({.server = server, .started = Clock::now()});
  attempt_deadline_ = Clock::time_point::max();  // set once the request went (request_sent)
  // Counted where it is read: least_request's picks (no cost otherwise).
  if (upstream_cfg_->balance == BalancePolicy::kLeastRequest) {
    in_flight_.hold(pools_.slots(*upstream_cfg_, server));
  }
  upstream_timed_out_ = false;
  leg_->start();
}

// An HTTP/1.1 attempt: a pooled connection to server_index_, else a new one.
void UpstreamExchange::connect_http1() {
  upstream_ = pools_.take_idle(*upstream_cfg_, server_index_);
  upstream_reused_ = upstream_ != nullptr;
  if (upstream_) return http1_.send_request_head();
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
  resolving_.resolver = std::make_unique<tcp::resolver>(asio::any_io_executor{executor_});
  resolving_.timer = std::make_unique<asio::steady_timer>(asio::any_io_executor{executor_},
                                                          upstream_cfg_->connect_timeout);
  resolving_.timer->async_wait(handler([](UpstreamExchange& self, beast::error_code ec) {
    if (!ec && self.resolving_.resolver) self.resolving_.resolver->cancel();
  }));
  resolving_.resolver->async_resolve(hp.host, std::to_string(hp.port),
                                     handler([](UpstreamExchange& self, beast::error_code ec,
                                                tcp::resolver::results_type results) {
                                       const bool timed_out =
                                           ec == asio::error::operation_aborted &&
                                           self.resolving_.timer->expiry() <=
                                               asio::steady_timer::clock_type::now();
                                       self.resolving_.timer->cancel();
                                       if (!self.upstream_) return;  // dropped meanwhile
                                       // Closed meanwhile: nothing goes upstream.
                                       if (self.host_.client_closed()) return self.abort();
                                       if (timed_out) return self.on_connect(beast::error::timeout);
                                       if (ec) return self.on_connect(ec);
                                       std::vector<tcp::endpoint> endpoints;
                                       for (const auto& r : results)
                                         endpoints.push_back(r.endpoint());
                                       self.connect_to(std::move(endpoints));
                                     }));
}

// The server has max_connections already: wait up to connect_timeout for one
// of them to close or come back idle, then answer 503.
void UpstreamExchange::wait_for_connection() {
  const auto generation = ++slot_.generation;
  slot_.waiting = true;
  if (!slot_.timer) slot_.timer = std::make_unique<ExchangeTimer>(executor_);
  // One deadline per exchange, however often a woken request loses its turn.
  if (slot_.deadline == Clock::time_point{}) {
    slot_.deadline = std::min(Clock::now() + upstream_cfg_->connect_timeout, deadline_at_);
  }
  slot_.timer->expires_at(slot_.deadline);
  slot_.timer->async_wait(handler([generation](UpstreamExchange& self, beast::error_code ec) {
    if (generation != self.slot_.generation || !self.slot_.waiting) return;
    if (ec) {
      // Cancelled for a client that left: the exchange ends (as aborted).
      if (self.host_.client_closed()) {
        self.slot_.waiting = false;
        self.abort();
      }
      return;
    }
    self.slot_.waiting = false;
    self.note_attempt(UpstreamOutcome::kConnectionLimit);
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
  return !host_.client_closed() && generation == slot_.generation && slot_.waiting;
}

bool UpstreamExchange::take_slot(std::uint64_t generation) {
  if (!waits(generation)) return false;
  slot_.waiting = false;
  slot_.timer->cancel();
  try {
    leg_->start();
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
  pools_.count_connection(*upstream_cfg_);
  beast::error_code ignored;
  upstream_->stream.socket().set_option(tcp::no_delay(true), ignored);
  if (upstream_cfg_->tls) return start_tls();
  http1_.send_request_head();
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
  if (!ec) return http1_.send_request_head();
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
  note_attempt(outcome);
  pools_.mark_failed(*upstream_cfg_, server_index_);
  drop_upstream();
  last_connect_error_ = error;
  if (retry_by_policy(RetryCause::kConnectFailure)) return;
  if (!policy_owns(RetryCause::kConnectFailure) &&
      retry_rule(attempt(FailedAttempt::Stage::kConnect)) == Retry::kNextServer) {
    return retry(Retry::kNextServer);
  }
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

}  // namespace sluice
