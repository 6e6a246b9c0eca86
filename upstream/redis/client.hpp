// The Redis client seen by its users (the rate limiter): send a command or a
// script call, each with its own deadline, and learn the outcome on the
// client's executor. Implementations (a single node today; Cluster and
// Sentinel beside it later) are constructed, used and destroyed on one
// executor, the worker's, and take no locks. Every completion handler is
// invoked on that executor, exactly once, and never from inside the call that
// started the operation (completions are posted). Destroying a client closes it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/inline_function.hpp"
#include "upstream/redis/codec.hpp"
#include "upstream/redis/error.hpp"
#include "upstream/redis/options.hpp"
#include "upstream/redis/reply.hpp"

namespace sluice::redis {

enum class State {
  kDisconnected,    // never connected yet (connect() or the first command starts it)
  kConnecting,      // resolve, TCP connect, TLS handshake
  kAuthenticating,  // AUTH, SELECT, PING and SCRIPT LOAD of known scripts
  kReady,           // commands are sent
  kBackoff,         // waiting before the next connect attempt
  kClosed,          // close() was called; final
};

std::string_view to_string(State state) noexcept;

// Counters since construction. Readable from any thread (metrics scrape).
struct Stats {
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
  // Sentinel and Cluster clients only (0 for a single node):
  std::uint64_t redirects_moved = 0;         // MOVED replies followed
  std::uint64_t redirects_ask = 0;           // ASK replies followed
  std::uint64_t topology_refresh_ok = 0;     // slot map / primary address learned
  std::uint64_t topology_refresh_error = 0;  // attempts that learned nothing
  std::uint64_t topology_changes = 0;        // the map or the primary's address changed

  // Adds every counter of `other` (a client's totals are the sum of its nodes').
  Stats& operator+=(const Stats& other);
};

// One Redis server a client talks to, for /readyz.
struct NodeStatus {
  std::string address;  // host:port
  std::string role;     // "primary", "sentinel" or "standalone"
  State state = State::kDisconnected;
  std::size_t slots = 0;   // cluster: slots this primary owns
  std::string last_error;  // why it last failed, if it has
};

class Client {
 public:
  // Move-only: a handler's captures (a limiter's completion among them) need
  // not be copyable, and up to 176 bytes of them are kept in place.
  using Handler = InlineFunction<void(std::error_code, Reply), 176>;
  using ConnectHandler = std::function<void(std::error_code)>;

  virtual ~Client() = default;

  // Starts connecting if the client has not yet (it reconnects by itself after
  // that). The handler (may be empty) gets the outcome of the current or next
  // connect attempt: success once ready, else kConnect, kTls, kAuth, kServer
  // (SELECT rejected) or kClosed. It completes at once if already ready.
  virtual void connect(ConnectHandler handler) = 0;
  // As connect(), but a client waiting out its reconnect backoff tries at
  // once: for a caller that paces its own attempts (the breaker's probe).
  virtual void connect_now(ConnectHandler handler) = 0;

  // Sends one command, e.g. {"SET", "k", "v"}. The handler gets:
  //   success + the reply;
  //   kServer / kNoScript + the error reply (reply.str holds Redis' message);
  //   kTimeout after options().command_timeout (the late reply is dropped);
  //   kNotConnected at once if the client is not ready (a connect attempt is
  //   started unless one is in flight or backing off);
  //   kConnectionLost, kProtocol or kClosed.
  virtual void command(std::vector<std::string> args, Handler handler) = 0;

  // A command on one key (args[1] names it, e.g. {"ZINCRBY", key, "1", "m"}),
  // completing as command() does. A single node or a Sentinel primary takes
  // it as command() would; a Cluster sends it to the owner of the key's slot
  // and answers a redirect (MOVED, ASK) as an error after asking for a fresh
  // slot map, without following it: for callers that may lose a command
  // while slots move (the denial audit).
  virtual void keyed_command(std::vector<std::string> args, Handler handler) {
    command(std::move(args), std::move(handler));
  }

  // EVALSHA script.sha1 with keys and args, completing as command() does. A
  // NOSCRIPT reply is retried once with EVAL, invisibly to the caller and
  // within the same deadline. Every script used here is also loaded with
  // SCRIPT LOAD on each new connection, so a restarted Redis costs no failed call.
  virtual void evalsha(const Script& script, std::vector<std::string> keys,
                       std::vector<std::string> args, Handler handler) = 0;

  // A reply Redis sent to a script call after its handler had completed with
  // kTimeout, with the call's keys and args as sent: Redis ran the call after
  // all, and the caller may have to undo what it did.
  using LateReplyHandler = std::function<void(const std::vector<std::string>& keys,
                                              const std::vector<std::string>& args, Reply reply)>;
  // As evalsha(); and if the call times out but Redis answers it later with
  // anything but an error, `late` gets that answer (on the client's
  // executor). A reply never comes when the connection is lost first.
  virtual void evalsha_late(const Script& script, std::vector<std::string> keys,
                            std::vector<std::string> args, Handler handler,
                            std::shared_ptr<const LateReplyHandler> late) {
    (void)late;
    evalsha(script, std::move(keys), std::move(args), std::move(handler));
  }

  // As evalsha_late(), but a Cluster sends it to the owner of the first
  // key's slot and answers a redirect (MOVED, ASK) as the kServer error it
  // is, after asking for a fresh slot map, without following it: for a call
  // that uses keys it does not declare (a node batch), which must not run
  // after ASKING, where every key of a slot being imported counts as the
  // node's own. Other clients send it as evalsha_late().
  virtual void evalsha_unredirected(const Script& script, std::vector<std::string> keys,
                                    std::vector<std::string> args, Handler handler,
                                    std::shared_ptr<const LateReplyHandler> late) {
    evalsha_late(script, std::move(keys), std::move(args), std::move(handler), std::move(late));
  }

  // Loads a script on the current (if ready) and every future connection.
  virtual void load_script(const Script& script) = 0;

  // Closes the connection and stops reconnecting. Pending commands and
  // connect handlers complete with kClosed. Idempotent.
  virtual void close() = 0;

  // Readable from any thread.
  virtual State state() const = 0;
  bool is_ready() const { return state() == State::kReady; }
  virtual Stats stats() const = 0;

  // Why the last connect attempt failed or the last connection was lost
  // (empty when none has). On the client's executor only.
  virtual std::error_code last_error() const = 0;
  virtual std::string last_error_message() const = 0;

  // What the client was built from; equal options mean the same connection.
  virtual const Options& options() const = 0;

  // The servers behind the client and their state. On the client's executor only.
  virtual std::vector<NodeStatus> nodes() const { return {}; }

  // True for a Redis Cluster: the keys of one evalsha must then share a hash
  // slot (the caller splits its calls by slot), and the call goes to the
  // slot's owner.
  virtual bool routes_by_slot() const { return false; }
  // A cluster: which primary owns `slot` in the client's slot map, as a
  // number that names it until the map next changes (nullopt: no owner, or
  // not a cluster). Calls whose keys have the same owner may go together.
  virtual std::optional<std::size_t> slot_owner(std::uint16_t slot) const {
    (void)slot;
    return std::nullopt;
  }
};

// Makes a client for `options` (on the executor the factory was made for):
// how a user that must replace its connection (a reload) gets a new one.
using ClientFactory = std::function<std::unique_ptr<Client>(Options options)>;

// "host:port", with brackets around an IPv6 host.
std::string format_address(std::string_view host, std::uint16_t port);

}  // namespace sluice::redis
