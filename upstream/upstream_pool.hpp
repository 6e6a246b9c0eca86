// Per-worker upstream connection pools: one instance per
// worker, used only on that worker's executor, so it takes no lock.
// The upstream's balance policy across its servers, passive health (a server that
// refuses or times out on connect is skipped for a cool-down), active health
// (a server its checker reports unhealthy is skipped until it recovers), and
// a pool of idle keep-alive connections per server.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "upstream/byte_stream.hpp"
#include "upstream/connection_budget.hpp"
#include "upstream/retry/retry_budget.hpp"
#include "upstream/health/upstream_health.hpp"
#include "upstream/stream_types.hpp"
#include "upstream/upstream_config.hpp"

namespace sluice {

class H2Connection;

// Connections of one worker to one server, against upstream max_connections,
// and the requests waiting for one of them to close or come back idle.
struct ServerSlots {
  std::size_t open = 0;                       // connections that exist (busy or idle)
  // waiter(true) takes the turn (true: taken); waiter(false) only asks
  // whether it still waits (one that gave up is dropped on the next trim).
  std::deque<std::function<bool(bool take)>> waiters;
  std::size_t trim_at = 64;  // the queue length that triggers the next trim
  std::size_t wakes = 0;                      // connections freed since the last wake-up ran
  bool wake_posted = false;
  std::size_t in_flight = 0;  // the worker's attempts at the server under way (InFlight)
};

// One connection to one upstream server.
struct UpstreamConnection {
  explicit UpstreamConnection(const WorkerExecutor& ex) : stream(WorkerStream::socket_type(ex)) {}
  ~UpstreamConnection();
  UpstreamConnection(const UpstreamConnection&) = delete;
  UpstreamConnection& operator=(const UpstreamConnection&) = delete;
  ByteStream stream;                 // plain TCP, or TLS once the handshake is under way
  boost::beast::flat_buffer buffer;  // read buffer; empty between exchanges
  HostPort address;                  // the server it is connected to
  std::string server;                // "host:port", for logs
  std::chrono::steady_clock::time_point idle_since{};
  bool ack_pending = false;            // idle, what was read not yet acknowledged
  std::shared_ptr<ServerSlots> slots;  // counted there while it exists
  DescriptorTicket descriptor;         // its share of the process's upstream descriptors
  std::function<void()> on_release;    // wakes a waiter when it closes
  // The TLS context it was made with (null: plain TCP): a pooled connection
  // is reused only under the same settings and files (UpstreamTls::same).
  const UpstreamTls* tls = nullptr;
  bool tls_session_kept = false;  // its session was kept for the next connection to resume
};

// The connections a worker may have to one server of `upstream` at once
// (max_connections, or the budget's default when absent; kUnlimited for 0).
std::size_t connection_cap(const UpstreamConfig& upstream);

class UpstreamPools {
 public:
  using Clock = std::chrono::steady_clock;

  explicit UpstreamPools(WorkerExecutor executor)
      : executor_(std::move(executor)),
        sweep_timer_(executor_),
        ack_timer_(executor_),
        budget_retry_timer_(executor_),
        random_(reinterpret_cast<std::uintptr_t>(this) ^
                static_cast<std::uint64_t>(Clock::now().time_since_epoch().count())) {}

  // The next server to try for `upstream`, chosen by its balance policy
  // (upstream/balance/server_pick.hpp) among the servers not in `tried`, not
  // in cool-down and healthy. `hash_key`: the request's key under balance
  // hash (none: a server drawn at random, by weight). None when no server is
  // left.
  std::optional<std::size_t> pick(const UpstreamConfig& upstream,
                                  const std::vector<std::size_t>& tried,
                                  std::optional<std::uint64_t> hash_key = std::nullopt);
  // Where this worker's requests in flight at the server are counted
  // (least_request reads them): an exchange counts its attempt there while
  // it lasts (InFlight).
  const std::shared_ptr<ServerSlots>& slots(const UpstreamConfig& upstream, std::size_t server) {
    return server_state(upstream, upstream.servers[server]).slots;
  }
  // Some server of `upstream` is reported unhealthy by its active checks.
  bool any_unhealthy(const UpstreamConfig& upstream);

  // The upstream's retry budget on this worker (it stays where it is: no
  // upstream's state is ever erased).
  RetryBudget& retry_budget(const UpstreamConfig& upstream) {
    return upstream_state(upstream).retry_budget;
  }

  // The health flags of the checked servers, for the configuration about to
  // be in force (start and reload).
  void set_health(std::shared_ptr<const UpstreamHealth> health);

  // An idle pooled connection to the server, checked to be open with nothing
  // to read, or null.
  std::unique_ptr<UpstreamConnection> take_idle(const UpstreamConfig& upstream, std::size_t server);

  // A new connection to the server counted against max_connections, or null
  // when the server has max_connections already.
  std::unique_ptr<UpstreamConnection> open(const UpstreamConfig& upstream, std::size_t server);

  // Queues `waiter` until a connection to the server closes or comes back
  // idle; it then runs on the worker's executor and returns true if it took
  // its turn (false: it had given up, the next waiter is asked).
  void wait_for_slot(const UpstreamConfig& upstream, std::size_t server,
                     std::function<bool(bool take)> waiter);

  // Returns a connection that finished a full, exactly framed exchange. It is
  // pooled if it is open with nothing buffered; while it is pooled, anything
  // that arrives on it (bytes nobody asked for, or the server's close) closes
  // it, at the latest on the next sweep (every kSweepEvery) or when taken.
  // Beyond max_idle_connections a pooled connection stays until the first
  // sweep kSurplusGrace after it went idle (a burst's connections serve the
  // next burst instead of being closed and opened again), then is closed;
  // none is kept so while the process's upstream descriptors run short.
  void give_back(const UpstreamConfig& upstream, std::unique_ptr<UpstreamConnection> conn);

  // The session a new TLS connection to the server resumes (null: none),
  // and the one to keep for the next, from a connection made with `upstream.tls`.
  TlsSessionRef tls_session(const UpstreamConfig& upstream, std::size_t server);
  void keep_tls_session(const UpstreamConfig& upstream, std::size_t server,
                        TlsSessionRef session);

  // HTTP/2 upstreams (protocol h2c, h2): a connection to the server that
  // takes another stream (H2Connection::has_room), made under the upstream's
  // current protocol and TLS settings. Null: open one (open()), or at
  // max_connections wait for room (wait_for_slot(): a waiter is woken when a
  // stream ends, a connection's SETTINGS let more in, or a connection closes).
  std::shared_ptr<H2Connection> h2_connection(const UpstreamConfig& upstream, std::size_t server);
  // A connection just opened to the server, for the next streams to share.
  void add_h2(const UpstreamConfig& upstream, std::size_t server,
              std::shared_ptr<H2Connection> conn);

  // Outlier detection: how an attempt at the server went; errors in a row
  // eject it (upstream/balance/outlier.hpp). Nothing without
  // upstream.outlier_detection.
  void record_attempt(const UpstreamConfig& upstream, std::size_t server, AttemptResult result);

  // Passive health: connect failures put the server in cool-down.
  void mark_failed(const UpstreamConfig& upstream, std::size_t server);
  void mark_ok(const UpstreamConfig& upstream, std::size_t server);

  const WorkerExecutor& executor() const { return executor_; }

  // Closes every idle connection (shutdown).
  void clear();

  // Open and readable-with-nothing-pending: safe to send a request on.
  static bool quiet(UpstreamConnection& conn);

  // Who is told of each new connection to a server of an upstream (the
  // worker counts them), and the telling, by whoever made the connection.
  void on_connection(std::function<void(const UpstreamConfig&)> counter) {
    connection_counter_ = std::move(counter);
  }
  void count_connection(const UpstreamConfig& upstream) {
    if (connection_counter_) connection_counter_(upstream);
  }
  // Who is told how many surplus idle connections a sweep closed (the worker
  // counts their memory as freed in bulk, for the heap trim).
  void on_surplus_closed(std::function<void(std::size_t)> told) {
    surplus_closed_ = std::move(told);
  }

 private:
  struct ServerState {
    std::deque<std::unique_ptr<UpstreamConnection>> idle;  // oldest first
    std::size_t keep_idle = 0;  // max_idle_connections when one was last given back
    std::vector<std::shared_ptr<H2Connection>> h2;  // HTTP/2 connections, shared by streams
    Clock::time_point cooldown_until{};
    std::shared_ptr<ServerSlots> slots = std::make_shared<ServerSlots>();
    std::shared_ptr<ServerHealth> health;  // null: neither checked nor under outlier detection
    // The TLS session a new connection resumes, and the context it was made
    // with (resumed under the same settings and files only).
    TlsSessionRef tls_session;
    std::shared_ptr<const UpstreamTls> tls_session_of;
    bool unhealthy() const { return health && !health->is_healthy(); }
  };
  // Servers are looked up by (host, port) without building a key string.
  struct ServerKey {
    std::string_view host;
    std::uint16_t port;
    auto operator<=>(const ServerKey&) const = default;
  };
  struct StoredKey {
    std::string host;
    std::uint16_t port;
    ServerKey view() const { return {host, port}; }
  };
  struct KeyLess {
    using is_transparent = void;
    static ServerKey v(const StoredKey& k) { return k.view(); }
    static ServerKey v(const ServerKey& k) { return k; }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return v(a) < v(b);
    }
  };
  struct UpstreamState {
    std::map<StoredKey, ServerState, KeyLess> servers;
    // The states of one configuration's servers by index, and which
    // configuration (generation, servers) they were found for.
    std::vector<ServerState*> by_index;
    std::uint64_t by_index_generation = 0;
    const HostPort* by_index_servers = nullptr;
    std::vector<std::int64_t> round_robin;  // the smooth round robin's running weights
    RetryBudget retry_budget;  // of the routes' retry policies, on this worker
  };
  std::vector<ServerState*>& states_by_index(const UpstreamConfig& upstream);
  ServerState& server_state(const UpstreamConfig& upstream, const HostPort& server);
  UpstreamState& upstream_state(const UpstreamConfig& upstream);
  void arm_sweep();
  void arm_ack();
  template <class Fn>
  void for_each_server(Fn fn) {
    for (auto& [name, upstream] : upstreams_) {
      for (auto& [key, server] : upstream.servers) fn(server);
    }
  }
  static void wake_waiter(const WorkerExecutor& executor, const std::shared_ptr<ServerSlots>& slots);
  static void wake_all_waiters(const WorkerExecutor& executor,
                               const std::shared_ptr<ServerSlots>& slots);
  DescriptorTicket take_descriptor(const UpstreamConfig& upstream);
  bool close_oldest_idle();
  void arm_budget_retry();

  std::function<void(std::size_t)> surplus_closed_;
  static constexpr auto kSweepEvery = std::chrono::seconds(1);
  // How long idle connections beyond max_idle_connections (a burst's) stay
  // for the next burst before a sweep closes them, oldest first.
  static constexpr auto kSurplusGrace = std::chrono::seconds(1);
  static constexpr auto kAckAfter = std::chrono::milliseconds(2);
  static constexpr auto kLogEvery = std::chrono::seconds(5);
  static constexpr auto kBudgetRetryEvery = std::chrono::milliseconds(20);
  static constexpr auto kBudgetRetryFor = std::chrono::seconds(10);

  WorkerExecutor executor_;
  std::function<void(const UpstreamConfig&)> connection_counter_;
  boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, WorkerExecutor>
      sweep_timer_;
  bool sweep_armed_ = false;
  boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, WorkerExecutor>
      ack_timer_;
  bool ack_armed_ = false;
  Clock::time_point next_budget_log_{};
  boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, WorkerExecutor>
      budget_retry_timer_;
  bool budget_retry_armed_ = false;
  Clock::time_point budget_refused_at_{};
  std::unordered_map<std::string, UpstreamState> upstreams_;  // by upstream name
  // The servers a request's exchange looked up last (a request looks its
  // server up several times), found again without hashing the upstream's
  // name. An entry is used only when its names still match: a reloaded
  // config's server may sit at a freed one's address. Nothing in upstreams_
  // is ever erased, so what an entry points to stays.
  struct RecentServer {
    const HostPort* server = nullptr;
    const std::string* name = nullptr;  // the key in upstreams_
    const StoredKey* key = nullptr;     // the key in its servers
    ServerState* state = nullptr;
  };
  std::array<RecentServer, 4> recent_{};
  struct RecentUpstream {
    const std::string* name = nullptr;
    UpstreamState* state = nullptr;
  } recent_upstream_;
  std::shared_ptr<const UpstreamHealth> health_ = std::make_shared<UpstreamHealth>();
  std::vector<PickServer> pick_servers_;  // pick()'s view of the servers, reused
  PickRandom random_;
};

// An attempt counted among its server's requests in flight while it lasts:
// hold() counts it (letting go of a previous count), release() or the end
// of the holder ends it. The count is shared, so a holder may outlive the
// pools (a session ended after its worker's pools at shutdown).
class InFlight {
 public:
  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { release(); }
  void hold(const std::shared_ptr<ServerSlots>& server) {
    if (server == server_) return;  // the same server again (a retry on it)
    release();
    server_ = server;
    ++server_->in_flight;
  }
  void release() {
    if (server_) --server_->in_flight;
    server_.reset();
  }

 private:
  std::shared_ptr<ServerSlots> server_;
};

}  // namespace sluice
