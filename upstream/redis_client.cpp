// Redis client over Asio with hiredis as the protocol codec.
//
// Shape of the implementation:
//  - RedisClient is a handle; RedisClient::Impl lives in a shared_ptr and every
//    pending handler holds it, so it outlives its own operations.
//  - Each connection attempt gets a fresh Connection (stream, reader, buffers).
//    Handlers hold their Connection too and return at once when it is no
//    longer the current one, so a torn-down stream is never touched again.
//  - awaiting_ holds every command written (or about to be written) on the
//    current connection, in wire order; replies pop it from the front. A
//    command that timed out stays there with an empty handler ("abandoned")
//    so its late reply is matched and dropped.
//  - One sweep timer serves all command deadlines and the stuck check.
#include "upstream/redis_client.hpp"

#include <hiredis/hiredis.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <optional>
#include <random>
#include <unordered_map>
#include <utility>

namespace sluice {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Errors

namespace {

class RedisCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "redis"; }
  std::string message(int ev) const override {
    switch (static_cast<RedisError>(ev)) {
      case RedisError::kTimeout:
        return "redis command timed out";
      case RedisError::kConnect:
        return "redis connect failed";
      case RedisError::kConnectionLost:
        return "redis connection lost";
      case RedisError::kProtocol:
        return "redis protocol error";
      case RedisError::kServer:
        return "redis error reply";
      case RedisError::kNoScript:
        return "redis script not loaded (NOSCRIPT)";
      case RedisError::kNotConnected:
        return "redis not connected";
      case RedisError::kTls:
        return "redis TLS error";
      case RedisError::kAuth:
        return "redis authentication failed";
      case RedisError::kClosed:
        return "redis client closed";
    }
    return "unknown redis error";
  }
};

}  // namespace

const std::error_category& redis_category() noexcept {
  static const RedisCategory category;
  return category;
}

std::error_code make_error_code(RedisError e) noexcept {
  return {static_cast<int>(e), redis_category()};
}

std::string_view redis_error_kind(std::error_code ec) noexcept {
  if (ec.category() == redis_category()) {
    switch (static_cast<RedisError>(ec.value())) {
      case RedisError::kTimeout:
        return "timeout";
      case RedisError::kProtocol:
        return "protocol";
      case RedisError::kServer:
        return "server";
      case RedisError::kNoScript:
        return "noscript";
      default:
        break;
    }
  }
  return "connect";
}

std::string_view to_string(RedisState state) noexcept {
  switch (state) {
    case RedisState::kDisconnected:
      return "disconnected";
    case RedisState::kConnecting:
      return "connecting";
    case RedisState::kAuthenticating:
      return "authenticating";
    case RedisState::kReady:
      return "ready";
    case RedisState::kBackoff:
      return "backoff";
    case RedisState::kClosed:
      return "closed";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// Protocol helpers: hiredis encodes and decodes, nothing else.

namespace {

constexpr std::size_t kReadChunk = 16 * 1024;

std::string sha1_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha1(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

// Collects arguments (views; they must outlive append_to) and appends their
// RESP encoding to a buffer. Reused, so steady state does not allocate.
class CommandEncoder {
 public:
  void add(std::string_view arg) {
    argv_.push_back(arg.empty() ? "" : arg.data());
    lens_.push_back(arg.size());
  }
  bool append_to(std::string& out) {
    char* cmd = nullptr;
    const int len = argv_.empty() ? -1
                                  : redisFormatCommandArgv(&cmd, static_cast<int>(argv_.size()),
                                                           argv_.data(), lens_.data());
    argv_.clear();
    lens_.clear();
    if (len < 0 || cmd == nullptr) return false;
    out.append(cmd, static_cast<std::size_t>(len));
    redisFreeCommand(cmd);
    return true;
  }

 private:
  std::vector<const char*> argv_;
  std::vector<std::size_t> lens_;
};

RedisReply convert_reply(const redisReply& r) {
  RedisReply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r.elements);
      for (std::size_t i = 0; i < r.elements; ++i)
        out.elements.push_back(convert_reply(*r.element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
      break;
  }
  return out;
}

struct ReaderDeleter {
  void operator()(redisReader* r) const { redisReaderFree(r); }
};
struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};

bool is_ip_literal(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

bool is_tls_error(const boost::system::error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() ||
         ec.category() == ssl::error::get_stream_category();
}

// One connection attempt: the stream (plain or TLS), the reply reader and the
// write buffers. Replaced wholesale on reconnect.
struct Connection {
  Connection(const asio::any_io_executor& ex, std::shared_ptr<ssl::context> ctx)
      : tls_ctx(std::move(ctx)), resolver(ex), reader(redisReaderCreate()), read_buf(kReadChunk) {
    if (tls_ctx) {
      tls.emplace(ex, *tls_ctx);
    } else {
      plain.emplace(ex);
    }
  }

  tcp::socket& socket() { return tls ? tls->next_layer() : *plain; }

  template <class Handler>
  void async_write(asio::const_buffer buffer, Handler&& handler) {
    if (tls) {
      asio::async_write(*tls, buffer, std::forward<Handler>(handler));
    } else {
      asio::async_write(*plain, buffer, std::forward<Handler>(handler));
    }
  }

  template <class Handler>
  void async_read_some(asio::mutable_buffer buffer, Handler&& handler) {
    if (tls) {
      tls->async_read_some(buffer, std::forward<Handler>(handler));
    } else {
      plain->async_read_some(buffer, std::forward<Handler>(handler));
    }
  }

  // Cancels everything in flight; handlers then see they are stale.
  void close() {
    boost::system::error_code ignored;
    resolver.cancel();
    socket().close(ignored);
  }

  std::shared_ptr<ssl::context> tls_ctx;  // declared first: outlives the stream
  tcp::resolver resolver;
  std::optional<tcp::socket> plain;
  std::optional<ssl::stream<tcp::socket>> tls;
  std::unique_ptr<redisReader, ReaderDeleter> reader;
  std::vector<char> read_buf;
  std::string out_pending;  // encoded commands for the next write
  std::size_t pending_commands = 0;
  std::string out_writing;  // bytes of the write in flight
  bool writing = false;
  bool flush_posted = false;
};

}  // namespace

RedisScript::RedisScript(std::string body)
    : body_(std::make_shared<const std::string>(std::move(body))), sha1_(sha1_hex(*body_)) {}

// ---------------------------------------------------------------------------
// Impl

class RedisClient::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::any_io_executor ex, RedisOptions options);

  void connect(ConnectHandler handler);
  void connect_now(ConnectHandler handler);
  void command(std::vector<std::string> args, Handler handler);
  void evalsha(const RedisScript& script, std::vector<std::string> keys,
               std::vector<std::string> args, Handler handler);
  void load_script(const RedisScript& script);
  void close();

  RedisState state() const { return state_.load(std::memory_order_relaxed); }
  RedisStats stats() const;
  std::error_code last_error() const { return last_error_; }
  const std::string& last_error_message() const { return last_error_message_; }
  const RedisOptions& options() const { return opts_; }

 private:
  using ConnPtr = std::shared_ptr<Connection>;

  // The arguments of an evalsha call, kept for a possible EVAL retry.
  struct ScriptCall {
    std::shared_ptr<const std::string> body;
    std::string numkeys;
    std::vector<std::string> keys;
    std::vector<std::string> args;
  };

  struct Entry {
    enum class Kind : std::uint8_t { kUser, kAuth, kSelect, kPing, kScriptLoad };
    Kind kind = Kind::kUser;
    bool retried = false;
    Handler handler;  // kUser: empty once completed (abandoned: the reply is dropped)
    std::shared_ptr<ScriptCall> script;  // evalsha: NOSCRIPT is retried once with EVAL
    Clock::time_point enqueued{};
    Clock::time_point deadline = Clock::time_point::max();
  };

  struct Counters {
    std::atomic<std::uint64_t> commands_sent{0}, writes{0}, replies{0}, timeouts{0},
        late_replies{0}, not_connected{0}, server_errors{0}, noscript_retries{0}, connects{0},
        connect_failures{0}, reconnects{0}, protocol_errors{0};
  };
  static void bump(std::atomic<std::uint64_t>& counter, std::uint64_t n = 1) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }

  // Connection lifecycle.
  void start_connect();
  void on_resolve(const ConnPtr& conn, const boost::system::error_code& ec,
                  const tcp::resolver::results_type& results);
  void on_tcp_connect(const ConnPtr& conn, const boost::system::error_code& ec);
  void on_tls_handshake(const ConnPtr& conn, const boost::system::error_code& ec);
  void start_handshake();
  void become_ready();
  void fail_connect(RedisError error, std::string detail);
  void drop_connection(RedisError error, std::string detail);
  void on_connection_error(RedisError error, std::string detail);
  void schedule_reconnect();
  std::chrono::milliseconds next_backoff();
  void teardown();
  void set_state(RedisState s) { state_.store(s, std::memory_order_relaxed); }

  // Commands and I/O.
  void fail_fast(Handler handler);
  bool remember_script(const RedisScript& script);
  void send_internal(Entry::Kind kind);
  void send_user(Entry entry);
  void schedule_flush();
  void start_write();
  void on_write(const ConnPtr& conn, const boost::system::error_code& ec);
  void do_read();
  void on_read(const ConnPtr& conn, const boost::system::error_code& ec, std::size_t n);
  void on_reply(RedisReply reply);
  void on_internal_reply(Entry::Kind kind, const RedisReply& reply);
  void retry_with_eval(Entry entry);

  // Deadlines.
  void arm_sweep(Clock::time_point at);
  void on_sweep();

  // Completions.
  void post_result(Handler handler, std::error_code ec, RedisReply reply = {});
  void fail_entries(RedisError error);
  void notify_waiters(std::error_code ec);

  asio::any_io_executor ex_;
  const RedisOptions opts_;
  const std::string verify_name_;  // server_name or host
  std::shared_ptr<ssl::context> tls_ctx_;
  std::string tls_setup_error_;  // non-empty: every attempt fails with kTls

  std::atomic<RedisState> state_{RedisState::kDisconnected};
  ConnPtr conn_;
  std::deque<Entry> awaiting_;
  std::size_t abandoned_ = 0;
  std::size_t handshake_remaining_ = 0;
  std::vector<ConnectHandler> waiters_;
  CommandEncoder encoder_;
  std::unordered_map<std::string, std::shared_ptr<const std::string>> scripts_;  // sha1 -> body

  // Each timer's wait carries a sequence number; a stale wait returns at once.
  asio::steady_timer connect_timer_;
  std::uint64_t connect_seq_ = 0;
  asio::steady_timer backoff_timer_;
  std::uint64_t backoff_seq_ = 0;
  unsigned backoff_attempt_ = 0;
  std::uint64_t consecutive_failures_ = 0;
  std::minstd_rand rng_;
  asio::steady_timer sweep_timer_;
  std::uint64_t sweep_seq_ = 0;
  bool sweep_armed_ = false;
  Clock::time_point sweep_at_{};

  std::error_code last_error_;
  std::string last_error_message_;
  Counters counters_;
};

RedisClient::Impl::Impl(asio::any_io_executor ex, RedisOptions options)
    : ex_(std::move(ex)),
      opts_(std::move(options)),
      verify_name_(opts_.server_name.empty() ? opts_.host : opts_.server_name),
      connect_timer_(ex_),
      backoff_timer_(ex_),
      rng_(std::random_device{}()),
      sweep_timer_(ex_) {
  if (!opts_.tls) return;
  // TLS 1.2+, peer verified against ca_file (or the system store), optional client cert.
  tls_ctx_ = std::make_shared<ssl::context>(ssl::context::tls_client);
  boost::system::error_code ec;
  tls_ctx_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                            ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                            ssl::context::no_tlsv1_1,
                        ec);
  if (opts_.ca_file.empty()) {
    tls_ctx_->set_default_verify_paths(ec);
    if (ec) tls_setup_error_ = "default CA store: " + ec.message();
  } else {
    tls_ctx_->load_verify_file(opts_.ca_file, ec);
    if (ec) tls_setup_error_ = "CA file " + opts_.ca_file + ": " + ec.message();
  }
  if (tls_setup_error_.empty() && !opts_.cert_file.empty()) {
    tls_ctx_->use_certificate_chain_file(opts_.cert_file, ec);
    if (ec) tls_setup_error_ = "certificate file " + opts_.cert_file + ": " + ec.message();
  }
  if (tls_setup_error_.empty() && !opts_.cert_file.empty()) {
    const std::string& key = opts_.key_file.empty() ? opts_.cert_file : opts_.key_file;
    tls_ctx_->use_private_key_file(key, ssl::context::pem, ec);
    if (ec) tls_setup_error_ = "key file " + key + ": " + ec.message();
  }
}

RedisStats RedisClient::Impl::stats() const {
  const auto get = [](const std::atomic<std::uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  RedisStats s;
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

void RedisClient::Impl::connect(ConnectHandler handler) {
  const RedisState s = state();
  if (s == RedisState::kClosed || s == RedisState::kReady) {
    if (handler) {
      const std::error_code ec = s == RedisState::kClosed ? RedisError::kClosed : std::error_code{};
      asio::post(ex_, [h = std::move(handler), ec] { h(ec); });
    }
    return;
  }
  if (handler) waiters_.push_back(std::move(handler));
  if (s == RedisState::kDisconnected) start_connect();
}

void RedisClient::Impl::connect_now(ConnectHandler handler) {
  if (state() != RedisState::kBackoff) return connect(std::move(handler));
  ++backoff_seq_;  // the pending backoff wake-up has nothing left to do
  backoff_timer_.cancel();
  if (handler) waiters_.push_back(std::move(handler));
  start_connect();
}

void RedisClient::Impl::command(std::vector<std::string> args, Handler handler) {
  if (!handler) handler = [](std::error_code, RedisReply) {};
  if (state() != RedisState::kReady) {
    fail_fast(std::move(handler));
    return;
  }
  for (const std::string& arg : args) encoder_.add(arg);
  if (!encoder_.append_to(conn_->out_pending)) {
    post_result(std::move(handler), RedisError::kProtocol);
    return;
  }
  Entry entry;
  entry.handler = std::move(handler);
  send_user(std::move(entry));
}

void RedisClient::Impl::evalsha(const RedisScript& script, std::vector<std::string> keys,
                                std::vector<std::string> args, Handler handler) {
  if (!handler) handler = [](std::error_code, RedisReply) {};
  const bool new_script = remember_script(script);
  if (state() != RedisState::kReady) {
    fail_fast(std::move(handler));
    return;
  }
  // A script seen for the first time is loaded in the same write, ahead of
  // its EVALSHA, so not even the first call pays a NOSCRIPT round trip.
  if (new_script) {
    encoder_.add("SCRIPT");
    encoder_.add("LOAD");
    encoder_.add(script.body());
    send_internal(Entry::Kind::kScriptLoad);
  }
  auto call = std::make_shared<ScriptCall>();
  call->body = script.body_;
  call->numkeys = std::to_string(keys.size());
  call->keys = std::move(keys);
  call->args = std::move(args);
  encoder_.add("EVALSHA");
  encoder_.add(script.sha1());
  encoder_.add(call->numkeys);
  for (const std::string& k : call->keys) encoder_.add(k);
  for (const std::string& a : call->args) encoder_.add(a);
  encoder_.append_to(conn_->out_pending);
  Entry entry;
  entry.handler = std::move(handler);
  entry.script = std::move(call);
  send_user(std::move(entry));
}

void RedisClient::Impl::load_script(const RedisScript& script) {
  if (!remember_script(script) || state() != RedisState::kReady) return;
  encoder_.add("SCRIPT");
  encoder_.add("LOAD");
  encoder_.add(script.body());
  send_internal(Entry::Kind::kScriptLoad);
  schedule_flush();
}

void RedisClient::Impl::close() {
  if (state() == RedisState::kClosed) return;
  teardown();
  backoff_timer_.cancel();
  ++backoff_seq_;
  set_state(RedisState::kClosed);
  fail_entries(RedisError::kClosed);
  notify_waiters(RedisError::kClosed);
}

// --- connection lifecycle ---------------------------------------------------

void RedisClient::Impl::start_connect() {
  set_state(RedisState::kConnecting);
  if (!tls_setup_error_.empty()) {
    fail_connect(RedisError::kTls, tls_setup_error_);
    return;
  }
  conn_ = std::make_shared<Connection>(ex_, tls_ctx_);
  if (!conn_->reader) {
    fail_connect(RedisError::kProtocol, "cannot create reply reader");
    return;
  }
  // One deadline covers resolve, TCP connect, TLS and the AUTH/SELECT/PING handshake.
  connect_timer_.expires_after(opts_.connect_timeout);
  connect_timer_.async_wait(
      [self = shared_from_this(), seq = ++connect_seq_](const boost::system::error_code&) {
        if (seq != self->connect_seq_) return;
        const RedisState s = self->state();
        if (s != RedisState::kConnecting && s != RedisState::kAuthenticating) return;
        self->fail_connect(RedisError::kConnect,
                           std::string(s == RedisState::kConnecting ? "connect" : "handshake") +
                               " timed out after " +
                               std::to_string(self->opts_.connect_timeout.count()) + " ms");
      });

  boost::system::error_code ec;
  const auto address = asio::ip::make_address(opts_.host, ec);
  if (!ec) {
    conn_->socket().async_connect(
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

void RedisClient::Impl::on_resolve(const ConnPtr& conn, const boost::system::error_code& ec,
                                   const tcp::resolver::results_type& results) {
  if (conn != conn_) return;
  if (ec) {
    fail_connect(RedisError::kConnect, "resolve " + opts_.host + ": " + ec.message());
    return;
  }
  asio::async_connect(
      conn->socket(), results,
      [self = shared_from_this(), conn](const boost::system::error_code& e, const tcp::endpoint&) {
        self->on_tcp_connect(conn, e);
      });
}

void RedisClient::Impl::on_tcp_connect(const ConnPtr& conn, const boost::system::error_code& ec) {
  if (conn != conn_) return;
  if (ec) {
    fail_connect(RedisError::kConnect,
                 "connect " + opts_.host + ":" + std::to_string(opts_.port) + ": " + ec.message());
    return;
  }
  boost::system::error_code ignored;
  conn->socket().set_option(tcp::no_delay(true), ignored);
  if (!conn->tls) {
    start_handshake();
    return;
  }
  // SNI (names only, never IP literals), then verify the chain and the name.
  auto& stream = *conn->tls;
  if (!is_ip_literal(verify_name_))
    SSL_set_tlsext_host_name(stream.native_handle(), verify_name_.c_str());
  boost::system::error_code vec;
  stream.set_verify_mode(ssl::verify_peer, vec);
  if (!vec) stream.set_verify_callback(ssl::host_name_verification(verify_name_), vec);
  if (vec) {
    fail_connect(RedisError::kTls, "TLS setup: " + vec.message());
    return;
  }
  stream.async_handshake(ssl::stream_base::client,
                         [self = shared_from_this(), conn](const boost::system::error_code& e) {
                           self->on_tls_handshake(conn, e);
                         });
}

void RedisClient::Impl::on_tls_handshake(const ConnPtr& conn, const boost::system::error_code& ec) {
  if (conn != conn_) return;
  if (ec) {
    fail_connect(RedisError::kTls, "TLS handshake with " + verify_name_ + ": " + ec.message());
    return;
  }
  start_handshake();
}

void RedisClient::Impl::start_handshake() {
  // AUTH, SELECT, PING and SCRIPT LOAD of known scripts, pipelined in one
  // write; the client is ready once every reply is in.
  set_state(RedisState::kAuthenticating);
  handshake_remaining_ = 0;
  const std::string db = std::to_string(opts_.db);
  if (!opts_.user.empty() || !opts_.password.empty()) {
    encoder_.add("AUTH");
    if (!opts_.user.empty()) encoder_.add(opts_.user);
    encoder_.add(opts_.password);
    send_internal(Entry::Kind::kAuth);
  }
  if (opts_.db != 0) {
    encoder_.add("SELECT");
    encoder_.add(db);
    send_internal(Entry::Kind::kSelect);
  }
  encoder_.add("PING");
  send_internal(Entry::Kind::kPing);
  for (const auto& [sha, body] : scripts_) {
    encoder_.add("SCRIPT");
    encoder_.add("LOAD");
    encoder_.add(*body);
    send_internal(Entry::Kind::kScriptLoad);
  }
  start_write();
  do_read();
}

void RedisClient::Impl::become_ready() {
  connect_timer_.cancel();
  ++connect_seq_;
  set_state(RedisState::kReady);
  backoff_attempt_ = 0;
  consecutive_failures_ = 0;
  bump(counters_.connects);
  spdlog::info("redis {}:{}: connected{}{}", opts_.host, opts_.port, opts_.tls ? " (TLS)" : "",
               opts_.db != 0 ? ", db " + std::to_string(opts_.db) : std::string());
  notify_waiters({});
}

void RedisClient::Impl::fail_connect(RedisError error, std::string detail) {
  teardown();
  awaiting_.clear();  // only handshake entries: no user command is sent before ready
  abandoned_ = 0;
  bump(counters_.connect_failures);
  last_error_ = error;
  last_error_message_ = std::move(detail);
  // Warn once per streak of failures; the retries are logged at debug.
  const auto level = ++consecutive_failures_ == 1 ? spdlog::level::warn : spdlog::level::debug;
  spdlog::log(level, "redis {}:{}: {} ({})", opts_.host, opts_.port, last_error_message_,
              make_error_code(error).message());
  notify_waiters(error);
  schedule_reconnect();
}

void RedisClient::Impl::drop_connection(RedisError error, std::string detail) {
  teardown();
  fail_entries(error);
  bump(counters_.reconnects);
  last_error_ = error;
  last_error_message_ = std::move(detail);
  spdlog::warn("redis {}:{}: connection dropped: {} ({})", opts_.host, opts_.port,
               last_error_message_, make_error_code(error).message());
  schedule_reconnect();
}

void RedisClient::Impl::on_connection_error(RedisError error, std::string detail) {
  switch (state()) {
    case RedisState::kReady:
      drop_connection(error, std::move(detail));
      break;
    case RedisState::kConnecting:
    case RedisState::kAuthenticating:
      fail_connect(error, std::move(detail));
      break;
    default:
      break;
  }
}

std::chrono::milliseconds RedisClient::Impl::next_backoff() {
  // Capped exponential backoff with "equal jitter": uniform in [d/2, d].
  const auto initial = std::max<std::int64_t>(opts_.backoff_initial.count(), 0);
  const auto cap = std::max<std::int64_t>(opts_.backoff_max.count(), initial);
  const unsigned shift = std::min(backoff_attempt_, 20u);
  const std::int64_t delay = std::min(cap, initial << shift);
  ++backoff_attempt_;
  if (delay <= 1) return std::chrono::milliseconds(delay);
  std::uniform_int_distribution<std::int64_t> jitter(delay / 2, delay);
  return std::chrono::milliseconds(jitter(rng_));
}

void RedisClient::Impl::schedule_reconnect() {
  set_state(RedisState::kBackoff);
  backoff_timer_.expires_after(next_backoff());
  backoff_timer_.async_wait(
      [self = shared_from_this(), seq = ++backoff_seq_](const boost::system::error_code&) {
        if (seq != self->backoff_seq_ || self->state() != RedisState::kBackoff) return;
        self->start_connect();
      });
}

void RedisClient::Impl::teardown() {
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

// --- commands and I/O -------------------------------------------------------

void RedisClient::Impl::fail_fast(Handler handler) {
  // Never queue behind a connection that is not ready: fail now, and start
  // connecting unless an attempt is in flight or backing off.
  const RedisState s = state();
  if (s == RedisState::kClosed) {
    post_result(std::move(handler), RedisError::kClosed);
    return;
  }
  bump(counters_.not_connected);
  post_result(std::move(handler), RedisError::kNotConnected);
  if (s == RedisState::kDisconnected) start_connect();
}

bool RedisClient::Impl::remember_script(const RedisScript& script) {
  return scripts_.try_emplace(script.sha1(), script.body_).second;
}

void RedisClient::Impl::send_internal(Entry::Kind kind) {
  encoder_.append_to(conn_->out_pending);
  ++conn_->pending_commands;
  Entry entry;
  entry.kind = kind;
  entry.enqueued = Clock::now();
  awaiting_.push_back(std::move(entry));
  if (state() == RedisState::kAuthenticating) ++handshake_remaining_;
}

void RedisClient::Impl::send_user(Entry entry) {
  // The encoded command is already in conn_->out_pending.
  const auto now = Clock::now();
  entry.enqueued = now;
  if (!entry.retried) entry.deadline = now + opts_.command_timeout;
  ++conn_->pending_commands;
  const auto deadline = entry.deadline;
  awaiting_.push_back(std::move(entry));
  arm_sweep(deadline);
  schedule_flush();
}

void RedisClient::Impl::schedule_flush() {
  // Flush after the current handler returns, so every command issued in the
  // same turn shares one write; while a write is in flight, on_write flushes.
  if (conn_->writing || conn_->flush_posted) return;
  conn_->flush_posted = true;
  asio::post(ex_, [self = shared_from_this(), conn = conn_] {
    conn->flush_posted = false;
    if (conn == self->conn_) self->start_write();
  });
}

void RedisClient::Impl::start_write() {
  Connection& c = *conn_;
  if (c.writing || c.out_pending.empty()) return;
  std::swap(c.out_writing, c.out_pending);
  c.out_pending.clear();
  bump(counters_.commands_sent, c.pending_commands);
  c.pending_commands = 0;
  bump(counters_.writes);
  c.writing = true;
  c.async_write(asio::buffer(c.out_writing), [self = shared_from_this(), conn = conn_](
                                                 const boost::system::error_code& ec, std::size_t) {
    self->on_write(conn, ec);
  });
}

void RedisClient::Impl::on_write(const ConnPtr& conn, const boost::system::error_code& ec) {
  if (conn != conn_) return;
  conn->writing = false;
  conn->out_writing.clear();
  if (ec) {
    on_connection_error(state() == RedisState::kReady ? RedisError::kConnectionLost
                        : is_tls_error(ec)            ? RedisError::kTls
                                                      : RedisError::kConnect,
                        "write: " + ec.message());
    return;
  }
  start_write();  // whatever queued up meanwhile goes out together
}

void RedisClient::Impl::do_read() {
  Connection& c = *conn_;
  c.async_read_some(asio::buffer(c.read_buf), [self = shared_from_this(), conn = conn_](
                                                  const boost::system::error_code& ec,
                                                  std::size_t n) { self->on_read(conn, ec, n); });
}

void RedisClient::Impl::on_read(const ConnPtr& conn, const boost::system::error_code& ec,
                                std::size_t n) {
  if (conn != conn_) return;
  if (ec) {
    on_connection_error(state() == RedisState::kReady ? RedisError::kConnectionLost
                        : is_tls_error(ec)            ? RedisError::kTls
                                                      : RedisError::kConnect,
                        "read: " + ec.message());
    return;
  }
  if (redisReaderFeed(conn->reader.get(), conn->read_buf.data(), n) != REDIS_OK) {
    bump(counters_.protocol_errors);
    on_connection_error(RedisError::kProtocol, "reply reader: out of memory");
    return;
  }
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(conn->reader.get(), &raw) != REDIS_OK) {
      bump(counters_.protocol_errors);
      on_connection_error(RedisError::kProtocol,
                          std::string("malformed reply: ") + conn->reader->errstr);
      return;
    }
    if (raw == nullptr) break;  // need more bytes
    const std::unique_ptr<redisReply, ReplyDeleter> reply(static_cast<redisReply*>(raw));
    bump(counters_.replies);
    on_reply(convert_reply(*reply));
    if (conn != conn_) return;  // the reply ended this connection
  }
  do_read();
}

void RedisClient::Impl::on_reply(RedisReply reply) {
  if (awaiting_.empty()) {
    bump(counters_.protocol_errors);
    on_connection_error(RedisError::kProtocol, "reply without a pending command");
    return;
  }
  Entry entry = std::move(awaiting_.front());
  awaiting_.pop_front();
  if (entry.kind != Entry::Kind::kUser) {
    on_internal_reply(entry.kind, reply);
    return;
  }
  if (!entry.handler) {  // timed out earlier: drop the late reply
    bump(counters_.late_replies);
    --abandoned_;
    return;
  }
  if (!reply.is_error()) {
    post_result(std::move(entry.handler), {}, std::move(reply));
    return;
  }
  const bool noscript = reply.str.starts_with("NOSCRIPT");
  if (noscript && entry.script && !entry.retried) {
    retry_with_eval(std::move(entry));
    return;
  }
  bump(counters_.server_errors);
  post_result(std::move(entry.handler), noscript ? RedisError::kNoScript : RedisError::kServer,
              std::move(reply));
}

void RedisClient::Impl::on_internal_reply(Entry::Kind kind, const RedisReply& reply) {
  if (kind == Entry::Kind::kScriptLoad) {
    // Not fatal: evalsha still falls back to EVAL.
    if (reply.is_error()) {
      spdlog::debug("redis {}:{}: SCRIPT LOAD failed: {}", opts_.host, opts_.port, reply.str);
    }
  } else if (reply.is_error()) {
    const bool auth = kind == Entry::Kind::kAuth || reply.str.starts_with("NOAUTH") ||
                      reply.str.starts_with("WRONGPASS") || reply.str.starts_with("NOPERM");
    const char* what = kind == Entry::Kind::kAuth     ? "AUTH"
                       : kind == Entry::Kind::kSelect ? "SELECT"
                                                      : "PING";
    on_connection_error(auth ? RedisError::kAuth : RedisError::kServer,
                        std::string(what) + " rejected: " + reply.str);
    return;
  }
  if (state() == RedisState::kAuthenticating && --handshake_remaining_ == 0) become_ready();
}

void RedisClient::Impl::retry_with_eval(Entry entry) {
  // The script cache was flushed (SCRIPT FLUSH, restart, failover): EVAL runs
  // and caches it. Same handler, same deadline; the caller sees one reply.
  bump(counters_.noscript_retries);
  const ScriptCall& call = *entry.script;
  encoder_.add("EVAL");
  encoder_.add(*call.body);
  encoder_.add(call.numkeys);
  for (const std::string& k : call.keys) encoder_.add(k);
  for (const std::string& a : call.args) encoder_.add(a);
  encoder_.append_to(conn_->out_pending);
  entry.retried = true;
  send_user(std::move(entry));
}

// --- deadlines --------------------------------------------------------------

void RedisClient::Impl::arm_sweep(Clock::time_point at) {
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

void RedisClient::Impl::on_sweep() {
  if (state() != RedisState::kReady) return;
  const auto now = Clock::now();
  auto next = Clock::time_point::max();
  // Complete overdue commands with kTimeout; they stay queued as abandoned.
  for (Entry& entry : awaiting_) {
    if (!entry.handler) continue;
    if (entry.deadline <= now) {
      bump(counters_.timeouts);
      ++abandoned_;
      post_result(std::move(entry.handler), RedisError::kTimeout);
      entry.handler = nullptr;
      entry.script.reset();
    } else {
      next = std::min(next, entry.deadline);
    }
  }
  if (awaiting_.empty()) return;
  // A connection whose oldest command has waited too long, or that has
  // piled up too many abandoned replies, is stuck: replace it.
  const auto stuck_at = awaiting_.front().enqueued + opts_.stuck_timeout;
  if (stuck_at <= now) {
    drop_connection(RedisError::kConnectionLost,
                    "no reply for " + std::to_string(opts_.stuck_timeout.count()) + " ms");
    return;
  }
  if (abandoned_ > opts_.max_abandoned) {
    drop_connection(RedisError::kConnectionLost,
                    std::to_string(abandoned_) + " timed-out commands still unanswered");
    return;
  }
  arm_sweep(std::min(next, stuck_at));
}

// --- completions ------------------------------------------------------------

void RedisClient::Impl::post_result(Handler handler, std::error_code ec, RedisReply reply) {
  asio::post(ex_,
             [h = std::move(handler), ec, r = std::move(reply)]() mutable { h(ec, std::move(r)); });
}

void RedisClient::Impl::fail_entries(RedisError error) {
  for (Entry& entry : awaiting_) {
    if (entry.kind == Entry::Kind::kUser && entry.handler) {
      post_result(std::move(entry.handler), error);
    }
  }
  awaiting_.clear();
  abandoned_ = 0;
}

void RedisClient::Impl::notify_waiters(std::error_code ec) {
  for (ConnectHandler& waiter : waiters_) {
    asio::post(ex_, [h = std::move(waiter), ec] { h(ec); });
  }
  waiters_.clear();
}

// ---------------------------------------------------------------------------
// RedisClient: a thin handle.

RedisClient::RedisClient(boost::asio::any_io_executor executor, RedisOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

RedisClient::~RedisClient() {
  if (impl_) impl_->close();
}

void RedisClient::connect(ConnectHandler handler) {
  impl_->connect(std::move(handler));
}

void RedisClient::connect_now(ConnectHandler handler) {
  impl_->connect_now(std::move(handler));
}

void RedisClient::command(std::vector<std::string> args, Handler handler) {
  impl_->command(std::move(args), std::move(handler));
}

void RedisClient::evalsha(const RedisScript& script, std::vector<std::string> keys,
                          std::vector<std::string> args, Handler handler) {
  impl_->evalsha(script, std::move(keys), std::move(args), std::move(handler));
}

void RedisClient::load_script(const RedisScript& script) {
  impl_->load_script(script);
}

void RedisClient::close() {
  impl_->close();
}

RedisState RedisClient::state() const {
  return impl_->state();
}

RedisStats RedisClient::stats() const {
  return impl_->stats();
}

std::error_code RedisClient::last_error() const {
  return impl_->last_error();
}

std::string RedisClient::last_error_message() const {
  return impl_->last_error_message();
}

const RedisOptions& RedisClient::options() const {
  return impl_->options();
}

}  // namespace sluice
