// The connect / handshake / backoff state machine of SingleNodeClient:
// Disconnected -> Connecting (resolve, TCP, TLS) -> Authenticating (AUTH,
// SELECT, PING, ROLE when a primary is required, SCRIPT LOAD pipelined in one
// write) -> Ready; a failure leads to Backoff and a new attempt, close() to
// Closed. A server that is not a primary fails a require_primary attempt.
// The handshake also asks TIME, and send_user() asks it again every few
// seconds: the probe's reply is an internal one, read here (redis_clock.hpp).
#include <charconv>

#include <spdlog/spdlog.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>

#include "upstream/redis/redis_clock.hpp"
#include "upstream/redis/single_node_impl.hpp"

namespace sluice::redis {

namespace asio = boost::asio;
using tcp = boost::asio::ip::tcp;

namespace {

// ROLE answers an array whose first element names the role: "master",
// "slave" or "sentinel".
bool is_primary_role(const Reply& reply) {
  return reply.type == Reply::Type::kArray && !reply.elements.empty() &&
         reply.elements.front().str == "master";
}

std::string describe_role(const Reply& reply) {
  if (reply.type != Reply::Type::kArray || reply.elements.empty()) return "of an unknown role";
  const std::string& role = reply.elements.front().str;
  if (role == "slave") return "a replica";
  if (role == "sentinel") return "a sentinel";
  return "of role \"" + role + "\"";
}

}  // namespace

void SingleNodeClient::Impl::start_connect() {
  set_state(State::kConnecting);
  if (!tls_setup_error_.empty()) {
    fail_connect(Error::kTls, tls_setup_error_);
    return;
  }
  conn_ = std::make_shared<Connection>(ex_, tls_ctx_);
  if (!conn_->reader.valid()) {
    fail_connect(Error::kProtocol, "cannot create reply reader");
    return;
  }
  // One deadline covers resolve, TCP connect, TLS and the AUTH/SELECT/PING handshake.
  connect_timer_.expires_after(opts_.connect_timeout);
  connect_timer_.async_wait(
      [self = shared_from_this(), seq = ++connect_seq_](const boost::system::error_code&) {
        if (seq != self->connect_seq_) return;
        const State s = self->state();
        if (s != State::kConnecting && s != State::kAuthenticating) return;
        self->fail_connect(Error::kConnect,
                           std::string(s == State::kConnecting ? "connect" : "handshake") +
                               " timed out after " +
                               std::to_string(self->opts_.connect_timeout.count()) + " ms");
      });

  boost::system::error_code ec;
  const auto address = asio::ip::make_address(opts_.host, ec);
  if (!ec) {
    conn_->stream.socket().async_connect(
        tcp::endpoint(address, opts_.port),
        [self = shared_from_this(), conn = conn_](const boost::system::error_code& e) {
          self->on_tcp_connect(conn, e);
        });
    return;
  }
  conn_->resolver.async_resolve(
      opts_.host, std::to_string(opts_.port),
      [self = shared_from_this(), conn = conn_](const boost::system::error_code& e,
                                                const tcp::resolver::results_type& results) {
        self->on_resolve(conn, e, results);
      });
}

void SingleNodeClient::Impl::on_resolve(const ConnPtr& conn, const boost::system::error_code& ec,
                                        const tcp::resolver::results_type& results) {
  if (conn != conn_) return;
  if (ec) {
    fail_connect(Error::kConnect, "resolve " + opts_.host + ": " + ec.message());
    return;
  }
  asio::async_connect(
      conn->stream.socket(), results,
      [self = shared_from_this(), conn](const boost::system::error_code& e, const tcp::endpoint&) {
        self->on_tcp_connect(conn, e);
      });
}

void SingleNodeClient::Impl::on_tcp_connect(const ConnPtr& conn,
                                            const boost::system::error_code& ec) {
  if (conn != conn_) return;
  if (ec) {
    fail_connect(Error::kConnect,
                 "connect " + opts_.host + ":" + std::to_string(opts_.port) + ": " + ec.message());
    return;
  }
  boost::system::error_code ignored;
  conn->stream.socket().set_option(tcp::no_delay(true), ignored);
  if (!conn->stream.is_tls()) {
    start_handshake();
    return;
  }
  if (const auto vec = conn->stream.prepare_tls(verify_name_)) {
    fail_connect(Error::kTls, "TLS setup: " + vec.message());
    return;
  }
  conn->stream.async_handshake(
      [self = shared_from_this(), conn](const boost::system::error_code& e) {
        self->on_tls_handshake(conn, e);
      });
}

void SingleNodeClient::Impl::on_tls_handshake(const ConnPtr& conn,
                                              const boost::system::error_code& ec) {
  if (conn != conn_) return;
  if (ec) {
    fail_connect(Error::kTls, "TLS handshake with " + verify_name_ + ": " + ec.message());
    return;
  }
  start_handshake();
}

void SingleNodeClient::Impl::start_handshake() {
  // AUTH, SELECT, PING, ROLE and SCRIPT LOAD of known scripts, pipelined in
  // one write; the client is ready once every reply is in.
  set_state(State::kAuthenticating);
  handshake_remaining_ = 0;
  const std::string db = std::to_string(opts_.db);
  if (!opts_.user.empty() || !opts_.password.empty()) {
    encoder_.add("AUTH");
    if (!opts_.user.empty()) encoder_.add(opts_.user);
    encoder_.add(opts_.password);
    send_internal(Kind::kAuth);
  }
  if (opts_.db != 0) {
    encoder_.add("SELECT");
    encoder_.add(db);
    send_internal(Kind::kSelect);
  }
  encoder_.add("PING");
  send_internal(Kind::kPing);
  time_probe_pending_ = false;
  send_time_probe();
  if (opts_.require_primary) {
    encoder_.add("ROLE");
    send_internal(Kind::kRole);
  }
  for (const auto& [sha, body] : scripts_) encode_script_load(*body);
  start_write();
  do_read();
}

namespace {
// How often a connection that carries commands asks the server's TIME again.
constexpr std::chrono::seconds kTimeProbeInterval{5};
}  // namespace

void SingleNodeClient::Impl::send_time_probe() {
  encoder_.add("TIME");
  time_probe_pending_ = true;
  next_time_probe_ = Clock::now() + kTimeProbeInterval;
  send_internal(Kind::kTime);
}

void SingleNodeClient::Impl::on_time_reply(const Reply& reply) {
  time_probe_pending_ = false;
  if (reply.type != Reply::Type::kArray || reply.elements.size() != 2) return;
  const auto number = [](const std::string& text, long long& out) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc{} && end == text.data() + text.size();
  };
  long long seconds = 0, micros = 0;
  if (!number(reply.elements[0].str, seconds) || !number(reply.elements[1].str, micros)) return;
  note_server_time(seconds * 1'000'000 + micros, steady_clock_us());
}

void SingleNodeClient::Impl::on_internal_reply(Kind kind, const Reply& reply) {
  if (kind == Kind::kTime) {
    on_time_reply(reply);  // not fatal: the clock keeps its last offset
  } else if (kind == Kind::kScriptLoad) {
    // Not fatal: evalsha still falls back to EVAL.
    if (reply.is_error()) {
      spdlog::debug("redis {}:{}: SCRIPT LOAD failed: {}", opts_.host, opts_.port, reply.str);
    }
  } else if (reply.is_error()) {
    const bool auth = kind == Kind::kAuth || reply.str.starts_with("NOAUTH") ||
                      reply.str.starts_with("WRONGPASS") || reply.str.starts_with("NOPERM");
    const char* what = kind == Kind::kAuth     ? "AUTH"
                       : kind == Kind::kSelect ? "SELECT"
                       : kind == Kind::kRole   ? "ROLE"
                                               : "PING";
    on_connection_error(auth ? Error::kAuth : Error::kServer,
                        std::string(what) + " rejected: " + reply.str);
    return;
  }
  if (kind == Kind::kRole && !is_primary_role(reply)) {
    on_connection_error(Error::kServer, "ROLE: " + format_address(opts_.host, opts_.port) + " is " +
                                            describe_role(reply) + ", not a primary");
    return;
  }
  if (state() == State::kAuthenticating && --handshake_remaining_ == 0) become_ready();
}

void SingleNodeClient::Impl::become_ready() {
  connect_timer_.cancel();
  ++connect_seq_;
  set_state(State::kReady);
  backoff_.reset();
  consecutive_failures_ = 0;
  bump(counters_.connects);
  spdlog::info("redis {}:{}: connected{}{}", opts_.host, opts_.port, opts_.tls ? " (TLS)" : "",
               opts_.db != 0 ? ", db " + std::to_string(opts_.db) : std::string());
  notify_waiters({});
}

void SingleNodeClient::Impl::fail_connect(Error error, std::string detail) {
  teardown();
  awaiting_.clear();  // only handshake entries: no user command is sent before ready
  bump(counters_.connect_failures);
  last_error_ = error;
  last_error_message_ = std::move(detail);
  // Warn once per streak of failures; the retries are logged at debug.
  const auto level = ++consecutive_failures_ == 1 ? spdlog::level::warn : spdlog::level::debug;
  spdlog::log(level, "redis {}:{}: {} ({})", opts_.host, opts_.port, last_error_message_,
              make_error_code(error).message());
  notify_waiters(error);
  schedule_reconnect();
  emit(Event::kConnectFailed, last_error_message_);
}

void SingleNodeClient::Impl::drop_connection(Error error, std::string detail) {
  fail_entries(error);  // before teardown: it tells which commands were never written
  teardown();
  bump(counters_.reconnects);
  last_error_ = error;
  last_error_message_ = std::move(detail);
  spdlog::warn("redis {}:{}: connection dropped: {} ({})", opts_.host, opts_.port,
               last_error_message_, make_error_code(error).message());
  schedule_reconnect();
  emit(Event::kConnectionLost, last_error_message_);
}

void SingleNodeClient::Impl::on_connection_error(Error error, std::string detail) {
  switch (state()) {
    case State::kReady:
      drop_connection(error, std::move(detail));
      break;
    case State::kConnecting:
    case State::kAuthenticating:
      fail_connect(error, std::move(detail));
      break;
    default:
      break;
  }
}

void SingleNodeClient::Impl::schedule_reconnect() {
  set_state(State::kBackoff);
  backoff_timer_.expires_after(backoff_.next());
  backoff_timer_.async_wait(
      [self = shared_from_this(), seq = ++backoff_seq_](const boost::system::error_code&) {
        if (seq != self->backoff_seq_ || self->state() != State::kBackoff) return;
        self->start_connect();
      });
}

void SingleNodeClient::Impl::teardown() {
  if (conn_) {
    conn_->close();
    conn_.reset();
  }
  connect_timer_.cancel();
  ++connect_seq_;
  sweep_timer_.cancel();
  ++sweep_seq_;
  sweep_armed_ = false;
}

void SingleNodeClient::Impl::notify_waiters(std::error_code ec) {
  for (ConnectHandler& waiter : waiters_) {
    asio::post(ex_, [h = std::move(waiter), ec] { h(ec); });
  }
  waiters_.clear();
}

}  // namespace sluice::redis
