// Redis client: one connection per worker, owned by and used only on that
// worker's executor, so it takes no lock. hiredis only encodes commands and
// decodes replies; Asio does the I/O over plain TCP or TLS. Commands issued
// while a write is in flight go out together in the next write (automatic
// pipelining) and replies are matched in order. Every command has a deadline;
// the connection has an explicit state and reconnects with capped backoff.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace sluice {

// ---------------------------------------------------------------------------
// Errors: one enum and category for the Redis subsystem.

enum class RedisError {
  kTimeout = 1,     // the command's deadline passed (its late reply is read and dropped)
  kConnect,         // resolve / TCP connect failed or timed out
  kConnectionLost,  // the connection broke (or was deemed stuck) with the command in flight
  kProtocol,        // malformed or unexpected reply, or an unencodable command
  kServer,          // Redis answered with an error reply (reply.str holds the message)
  kNoScript,        // NOSCRIPT: the script is not loaded (evalsha retries this once by itself)
  kNotConnected,    // the client was not ready; the command was not sent
  kTls,             // TLS setup, handshake or peer verification failed
  kAuth,            // AUTH rejected (wrong password, unknown user) or NOAUTH
  kClosed,          // close() was called
};

const std::error_category& redis_category() noexcept;
std::error_code make_error_code(RedisError e) noexcept;

// The `kind` label of sluice_redis_errors_total for an error from this client:
// "timeout", "protocol", "server", "noscript" or "connect" (everything else).
std::string_view redis_error_kind(std::error_code ec) noexcept;
// Every value redis_error_kind() returns.
inline constexpr std::string_view kRedisErrorKinds[] = {"timeout", "connect", "protocol", "server",
                                                        "noscript"};

// ---------------------------------------------------------------------------
// Replies (RESP2), free of hiredis types.

struct RedisReply {
  enum class Type { kNil, kString, kStatus, kError, kInteger, kArray };

  Type type = Type::kNil;
  std::string str;                   // kString, kStatus, kError
  long long integer = 0;             // kInteger
  std::vector<RedisReply> elements;  // kArray

  bool is_nil() const { return type == Type::kNil; }
  bool is_error() const { return type == Type::kError; }
};

// ---------------------------------------------------------------------------
// Connection options. The gateway fills them from its RedisConfig.

struct RedisOptions {
  std::string host = "127.0.0.1";  // IP literal or name
  std::uint16_t port = 6379;
  std::string user;         // ACL user; empty = default user
  std::string password;     // empty (and no user) = no AUTH
  int db = 0;               // SELECT db during the handshake when non-zero
  bool tls = false;         // rediss://
  std::string ca_file;      // verify the server against this CA bundle; empty = system store
  std::string cert_file;    // optional client certificate (PEM chain)
  std::string key_file;     // its private key (PEM)
  std::string server_name;  // SNI and the name checked in the certificate; empty = host
  std::chrono::milliseconds connect_timeout{1000};  // resolve + connect + TLS + handshake
  std::chrono::milliseconds command_timeout{50};    // deadline of one command
  std::chrono::milliseconds backoff_initial{50};    // first reconnect delay (with jitter)
  std::chrono::milliseconds backoff_max{2000};      // reconnect delay cap
  // The connection is replaced when the oldest command in flight has had no
  // reply for this long (peer stopped or vanished), or when more than
  // max_abandoned timed-out commands still wait for their late replies.
  std::chrono::milliseconds stuck_timeout{1000};
  std::size_t max_abandoned = 1024;
};

enum class RedisState {
  kDisconnected,    // never connected yet (connect() or the first command starts it)
  kConnecting,      // resolve, TCP connect, TLS handshake
  kAuthenticating,  // AUTH, SELECT, PING and SCRIPT LOAD of known scripts
  kReady,           // commands are sent
  kBackoff,         // waiting before the next connect attempt
  kClosed,          // close() was called; final
};

std::string_view to_string(RedisState state) noexcept;

// Counters since construction. Readable from any thread (metrics scrape).
struct RedisStats {
  std::uint64_t commands_sent = 0;     // commands written, incl. handshake and NOSCRIPT retries
  std::uint64_t writes = 0;            // network writes; each carries one or more commands
  std::uint64_t replies = 0;           // replies read
  std::uint64_t timeouts = 0;          // commands completed with kTimeout
  std::uint64_t late_replies = 0;      // replies to timed-out commands, read and dropped
  std::uint64_t not_connected = 0;     // commands failed fast with kNotConnected
  std::uint64_t server_errors = 0;     // commands completed with kServer or kNoScript
  std::uint64_t noscript_retries = 0;  // evalsha calls retried with EVAL after NOSCRIPT
  std::uint64_t connects = 0;          // connections that became ready
  std::uint64_t connect_failures = 0;  // connect attempts that failed
  std::uint64_t reconnects = 0;        // ready connections lost or replaced
  std::uint64_t protocol_errors = 0;   // malformed or unexpected replies
};

// A Lua script with its SHA1 (computed locally). Cheap to copy.
class RedisScript {
 public:
  explicit RedisScript(std::string body);
  const std::string& body() const { return *body_; }
  const std::string& sha1() const { return sha1_; }  // 40 lowercase hex digits

 private:
  friend class RedisClient;
  std::shared_ptr<const std::string> body_;
  std::string sha1_;
};

// One Redis connection. Construct, use and destroy it on one executor (the
// worker's); it takes no locks. Every completion handler is invoked on that
// executor, exactly once, and never from inside the call that started the
// operation (completions are posted). Destroying the client closes it.
class RedisClient {
 public:
  using Handler = std::function<void(std::error_code, RedisReply)>;
  using ConnectHandler = std::function<void(std::error_code)>;

  RedisClient(boost::asio::any_io_executor executor, RedisOptions options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Starts connecting if the client has not yet (it reconnects by itself after
  // that). The optional handler gets the outcome of the current or next
  // connect attempt: success once ready, else kConnect, kTls, kAuth, kServer
  // (SELECT rejected) or kClosed. It completes at once if already ready.
  void connect(ConnectHandler handler = {});
  // As connect(), but a client waiting out its reconnect backoff tries at
  // once: for a caller that paces its own attempts (the breaker's probe).
  void connect_now(ConnectHandler handler = {});

  // Sends one command, e.g. {"SET", "k", "v"}. The handler gets:
  //   success + the reply;
  //   kServer / kNoScript + the error reply (reply.str holds Redis' message);
  //   kTimeout after options.command_timeout (the late reply is dropped);
  //   kNotConnected at once if the client is not ready (a connect attempt is
  //   started unless one is in flight or backing off);
  //   kConnectionLost, kProtocol or kClosed.
  void command(std::vector<std::string> args, Handler handler);

  // EVALSHA script.sha1 with keys and args. A NOSCRIPT reply is retried once
  // with EVAL, invisibly to the caller and within the same deadline. Every
  // script used here is also loaded with SCRIPT LOAD on each new connection,
  // so a restarted Redis costs no failed call.
  void evalsha(const RedisScript& script, std::vector<std::string> keys,
               std::vector<std::string> args, Handler handler);

  // Loads a script on the current (if ready) and every future connection.
  void load_script(const RedisScript& script);

  // Closes the connection and stops reconnecting. Pending commands and
  // connect handlers complete with kClosed. Idempotent.
  void close();

  // Readable from any thread.
  RedisState state() const;
  bool is_ready() const { return state() == RedisState::kReady; }
  RedisStats stats() const;

  // Why the last connect attempt failed or the last connection was lost
  // (empty when none has). On the client's executor only.
  std::error_code last_error() const;
  std::string last_error_message() const;

  const RedisOptions& options() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice

namespace std {
template <>
struct is_error_code_enum<sluice::RedisError> : true_type {};
}  // namespace std
