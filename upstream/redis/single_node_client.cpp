// SingleNodeClient: the handle, the public operations, and the command path:
// encode into the connection's pending buffer, flush once per executor turn
// (automatic pipelining), and one sweep timer for every command deadline and
// the stuck check. Replies are read and matched in single_node_replies.cpp,
// the connect state machine is in single_node_connect.cpp.
#include "upstream/redis/single_node_client.hpp"

#include <boost/asio/post.hpp>

#include "common/spares.hpp"
#include "upstream/redis/single_node_impl.hpp"

namespace sluice::redis {

namespace asio = boost::asio;

SingleNodeClient::Impl::Impl(asio::any_io_executor ex, Options options)
    : ex_(std::move(ex)),
      opts_(std::move(options)),
      verify_name_(opts_.server_name.empty() ? opts_.host : opts_.server_name),
      tls_ctx_(make_tls_context(opts_, tls_setup_error_)),
      connect_timer_(ex_),
      backoff_timer_(ex_),
      backoff_(opts_.backoff_initial, opts_.backoff_max),
      sweep_timer_(ex_) {}

Stats SingleNodeClient::Impl::stats() const {
  const auto get = [](const std::atomic<std::uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  Stats s;
  s.commands_sent = get(counters_.commands_sent);
  s.writes = get(counters_.writes);
  s.replies = get(counters_.replies);
  s.timeouts = get(counters_.timeouts);
  s.late_replies = get(counters_.late_replies);
  s.not_connected = get(counters_.not_connected);
  s.server_errors = get(counters_.server_errors);
  s.noscript_retries = get(counters_.noscript_retries);
  s.connects = get(counters_.connects);
  s.connect_failures = get(counters_.connect_failures);
  s.reconnects = get(counters_.reconnects);
  s.protocol_errors = get(counters_.protocol_errors);
  return s;
}

// --- public operations ------------------------------------------------------

void SingleNodeClient::Impl::connect(ConnectHandler handler) {
  const State s = state();
  if (s == State::kClosed || s == State::kReady) {
    if (handler) {
      const std::error_code ec = s == State::kClosed ? Error::kClosed : std::error_code{};
      asio::post(ex_, [h = std::move(handler), ec] { h(ec); });
    }
    return;
  }
  if (handler) waiters_.push_back(std::move(handler));
  if (s == State::kDisconnected) start_connect();
}

void SingleNodeClient::Impl::connect_now(ConnectHandler handler) {
  if (state() != State::kBackoff) return connect(std::move(handler));
  ++backoff_seq_;  // the pending backoff wake-up has nothing left to do
  backoff_timer_.cancel();
  if (handler) waiters_.push_back(std::move(handler));
  start_connect();
}

void SingleNodeClient::Impl::command(std::vector<std::string> args, Handler handler,
                                     Clock::time_point deadline) {
  if (!handler) handler = [](std::error_code, Reply) {};
  if (state() != State::kReady) {
    keep_spare(std::move(args));
    fail_fast(std::move(handler));
    return;
  }
  for (const std::string& arg : args) encoder_.add(arg);
  const bool encoded = encoder_.append_to(conn_->out_pending);
  keep_spare(std::move(args));  // written out: its strings go back to the spares
  if (!encoded) {
    post_result(std::move(handler), Error::kProtocol);
    return;
  }
  CommandQueue::Entry entry;
  entry.handler = std::move(handler);
  entry.deadline = deadline;
  send_user(std::move(entry));
}

void SingleNodeClient::Impl::evalsha(const Script& script, std::vector<std::string> keys,
                                     std::vector<std::string> args, Handler handler,
                                     Clock::time_point deadline,
                                     std::shared_ptr<const LateReplyHandler> late) {
  auto call = CommandQueue::make_script_call();
  call->body = script.shared_body();
  call->numkeys = std::to_string(keys.size());
  call->keys = std::move(keys);
  call->args = std::move(args);
  call->late = std::move(late);
  evalsha_call(script, std::move(call), std::move(handler), deadline);
}

void SingleNodeClient::Impl::evalsha_call(const Script& script,
                                          std::shared_ptr<CommandQueue::ScriptCall> call,
                                          Handler handler, Clock::time_point deadline) {
  if (!handler) handler = [](std::error_code, Reply) {};
  const bool new_script = remember_script(script);
  if (state() != State::kReady) {
    fail_fast(std::move(handler));
    return;
  }
  // A script seen for the first time is loaded in the same write, ahead of
  // its EVALSHA, so not even the first call pays a NOSCRIPT round trip.
  if (new_script) encode_script_load(script.body());
  encoder_.add("EVALSHA");
  encoder_.add(script.sha1());
  encoder_.add(call->numkeys);
  for (const std::string& k : call->keys) encoder_.add(k);
  for (const std::string& a : call->args) encoder_.add(a);
  encoder_.append_to(conn_->out_pending);
  CommandQueue::Entry entry;
  entry.handler = std::move(handler);
  entry.script = std::move(call);
  entry.deadline = deadline;
  send_user(std::move(entry));
}

void SingleNodeClient::Impl::load_script(const Script& script) {
  if (!remember_script(script) || state() != State::kReady) return;
  encode_script_load(script.body());
  schedule_flush();
}

void SingleNodeClient::Impl::close() {
  if (state() == State::kClosed) return;
  teardown();
  backoff_timer_.cancel();
  ++backoff_seq_;
  set_state(State::kClosed);
  fail_entries(Error::kClosed);
  notify_waiters(Error::kClosed);
}

// --- commands and I/O -------------------------------------------------------

void SingleNodeClient::Impl::fail_fast(Handler handler) {
  // Never queue behind a connection that is not ready: fail now, and start
  // connecting unless an attempt is in flight or backing off.
  const State s = state();
  if (s == State::kClosed) {
    post_result(std::move(handler), Error::kClosed);
    return;
  }
  bump(counters_.not_connected);
  post_result(std::move(handler), Error::kNotConnected);
  if (s == State::kDisconnected) start_connect();
}

bool SingleNodeClient::Impl::remember_script(const Script& script) {
  return scripts_.try_emplace(script.sha1(), script.shared_body()).second;
}

void SingleNodeClient::Impl::encode_script_load(const std::string& body) {
  encoder_.add("SCRIPT");
  encoder_.add("LOAD");
  encoder_.add(body);
  send_internal(Kind::kScriptLoad);
}

void SingleNodeClient::Impl::send_internal(Kind kind) {
  encoder_.append_to(conn_->out_pending);
  ++conn_->pending_commands;
  awaiting_.push_internal(kind, Clock::now());
  if (state() == State::kAuthenticating) ++handshake_remaining_;
}

void SingleNodeClient::Impl::send_user(CommandQueue::Entry entry) {
  // The encoded command is already in conn_->out_pending.
  ++conn_->pending_commands;
  const auto now = Clock::now();
  arm_sweep(awaiting_.push_user(std::move(entry), now, opts_.command_timeout));
  if (!time_probe_pending_ && now >= next_time_probe_) send_time_probe();
  schedule_flush();
}

void SingleNodeClient::Impl::schedule_flush() {
  // Flush after the current handler returns, so every command issued in the
  // same turn shares one write; while a write is in flight, on_write flushes.
  if (conn_->writing || conn_->flush_posted) return;
  conn_->flush_posted = true;
  asio::post(ex_, [self = shared_from_this(), conn = conn_] {
    conn->flush_posted = false;
    if (conn == self->conn_) self->start_write();
  });
}

void SingleNodeClient::Impl::start_write() {
  Connection& c = *conn_;
  if (c.writing || c.out_pending.empty()) return;
  std::swap(c.out_writing, c.out_pending);
  c.out_pending.clear();
  bump(counters_.commands_sent, c.pending_commands);
  c.pending_commands = 0;
  bump(counters_.writes);
  c.writing = true;
  c.stream.async_write(asio::buffer(c.out_writing), [self = shared_from_this(), conn = conn_](
                                                        const boost::system::error_code& ec,
                                                        std::size_t) { self->on_write(conn, ec); });
}

void SingleNodeClient::Impl::on_write(const ConnPtr& conn, const boost::system::error_code& ec) {
  if (conn != conn_) return;
  conn->writing = false;
  conn->out_writing.clear();
  if (ec) {
    on_connection_error(state() == State::kReady ? Error::kConnectionLost
                        : is_tls_error(ec)       ? Error::kTls
                                                 : Error::kConnect,
                        "write: " + ec.message());
    return;
  }
  start_write();  // whatever queued up meanwhile goes out together
}

void SingleNodeClient::Impl::arm_sweep(Clock::time_point at) {
  if (sweep_armed_ && sweep_at_ <= at) return;
  sweep_armed_ = true;
  sweep_at_ = at;
  sweep_timer_.expires_at(at);
  sweep_timer_.async_wait(
      [self = shared_from_this(), seq = ++sweep_seq_](const boost::system::error_code&) {
        if (seq != self->sweep_seq_) return;
        self->sweep_armed_ = false;
        self->on_sweep();
      });
}

void SingleNodeClient::Impl::on_sweep() {
  if (state() != State::kReady) return;
  const auto now = Clock::now();
  // Complete overdue commands with kTimeout; they stay queued as abandoned.
  const auto next = awaiting_.expire(now, [this](Handler&& handler) {
    bump(counters_.timeouts);
    post_result(std::move(handler), Error::kTimeout);
  });
  if (awaiting_.empty()) return;
  // A connection whose oldest command has waited too long, or that has
  // piled up too many abandoned replies, is stuck: replace it.
  const auto stuck_at = awaiting_.oldest_enqueued() + opts_.stuck_timeout;
  if (stuck_at <= now) {
    drop_connection(Error::kConnectionLost,
                    "no reply for " + std::to_string(opts_.stuck_timeout.count()) + " ms");
    return;
  }
  if (awaiting_.abandoned() > opts_.max_abandoned) {
    drop_connection(Error::kConnectionLost,
                    std::to_string(awaiting_.abandoned()) + " timed-out commands still unanswered");
    return;
  }
  arm_sweep(std::min(next, stuck_at));
}

// --- completions ------------------------------------------------------------

void SingleNodeClient::Impl::post_result(Handler handler, std::error_code ec, Reply reply) {
  asio::post(ex_,
             [h = std::move(handler), ec, r = std::move(reply)]() mutable { h(ec, std::move(r)); });
}

void SingleNodeClient::Impl::fail_entries(Error error) {
  // Commands still waiting for a write never reached Redis: they fail as if
  // the client had not been connected (a caller may send them again).
  const std::size_t unsent = conn_ ? conn_->pending_commands : 0;
  awaiting_.fail_all(
      [&](Handler&& handler, bool sent) {
        post_result(std::move(handler), sent ? error : Error::kNotConnected);
      },
      unsent);
}

// --- the handle -------------------------------------------------------------

SingleNodeClient::SingleNodeClient(asio::any_io_executor executor, Options options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

SingleNodeClient::~SingleNodeClient() {
  if (impl_) impl_->close();
}

void SingleNodeClient::connect(ConnectHandler handler) {
  impl_->connect(std::move(handler));
}
void SingleNodeClient::connect_now(ConnectHandler handler) {
  impl_->connect_now(std::move(handler));
}
void SingleNodeClient::command(std::vector<std::string> args, Handler handler) {
  impl_->command(std::move(args), std::move(handler));
}
void SingleNodeClient::evalsha(const Script& script, std::vector<std::string> keys,
                               std::vector<std::string> args, Handler handler) {
  impl_->evalsha(script, std::move(keys), std::move(args), std::move(handler));
}
void SingleNodeClient::evalsha_late(const Script& script, std::vector<std::string> keys,
                                    std::vector<std::string> args, Handler handler,
                                    std::shared_ptr<const LateReplyHandler> late) {
  impl_->evalsha(script, std::move(keys), std::move(args), std::move(handler),
                 Impl::Clock::time_point::max(), std::move(late));
}
void SingleNodeClient::command_until(TimePoint deadline, std::vector<std::string> args,
                                     Handler handler) {
  impl_->command(std::move(args), std::move(handler), deadline);
}
void SingleNodeClient::evalsha_until(TimePoint deadline, const Script& script,
                                     std::vector<std::string> keys, std::vector<std::string> args,
                                     Handler handler) {
  impl_->evalsha(script, std::move(keys), std::move(args), std::move(handler), deadline);
}
void SingleNodeClient::evalsha_shared(TimePoint deadline, const Script& script,
                                      std::shared_ptr<CommandQueue::ScriptCall> call,
                                      Handler handler) {
  impl_->evalsha_call(script, std::move(call), std::move(handler), deadline);
}
void SingleNodeClient::load_script(const Script& script) {
  impl_->load_script(script);
}
void SingleNodeClient::on_event(EventHandler handler) {
  impl_->on_event_ = std::move(handler);
}
void SingleNodeClient::close() {
  impl_->close();
}
State SingleNodeClient::state() const {
  return impl_->state();
}
Stats SingleNodeClient::stats() const {
  return impl_->stats();
}
std::error_code SingleNodeClient::last_error() const {
  return impl_->last_error_;
}
std::string SingleNodeClient::last_error_message() const {
  return impl_->last_error_message_;
}
const Options& SingleNodeClient::options() const {
  return impl_->opts_;
}
std::vector<NodeStatus> SingleNodeClient::nodes() const {
  NodeStatus node;
  node.address = format_address(impl_->opts_.host, impl_->opts_.port);
  node.role = impl_->opts_.require_primary ? "primary" : "standalone";
  node.state = impl_->state();
  node.last_error = impl_->last_error_message_;
  return {std::move(node)};
}

ClientFactory single_node_factory(asio::any_io_executor executor) {
  return [executor](Options options) -> std::unique_ptr<Client> {
    return std::make_unique<SingleNodeClient>(executor, std::move(options));
  };
}

}  // namespace sluice::redis
