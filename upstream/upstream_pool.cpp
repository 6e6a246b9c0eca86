#include "upstream/upstream_pool.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "upstream/h2/h2_connection.hpp"

namespace sluice {

ConnectionBudget& connection_budget() {
  static ConnectionBudget budget;
  return budget;
}

std::size_t connection_cap(const UpstreamConfig& upstream) {
  if (!upstream.max_connections) return connection_budget().default_connections_per_server();
  return *upstream.max_connections == 0 ? ConnectionBudget::kUnlimited : *upstream.max_connections;
}

UpstreamConnection::~UpstreamConnection() {
  if (slots) --slots->open;
  if (on_release) on_release();
}

std::unique_ptr<UpstreamConnection> UpstreamPools::open(const UpstreamConfig& upstream,
                                                        std::size_t server) {
  auto& state = server_state(upstream, upstream.servers[server]);
  if (state.slots->open >= connection_cap(upstream)) return nullptr;
  DescriptorTicket ticket = take_descriptor(upstream);
  if (!ticket) return nullptr;
  auto conn = std::make_unique<UpstreamConnection>(executor_);
  conn->descriptor = std::move(ticket);
  conn->slots = state.slots;
  ++state.slots->open;
  // When it closes, a request waiting for a connection to this server may go.
  conn->on_release = [executor = executor_, slots = state.slots] {
    if (!slots->waiters.empty()) wake_waiter(executor, slots);
  };
  return conn;
}

// A descriptor for a new connection, from the process's budget. When every
// one is in use, this worker's oldest idle pooled connection (to any server)
// is closed to make room; with none idle, the request waits (logged at most
// every kLogEvery per worker, counted) and the waiters are retried as
// descriptors come back elsewhere.
DescriptorTicket UpstreamPools::take_descriptor(const UpstreamConfig& upstream) {
  auto& budget = connection_budget();
  if (budget.try_take()) return DescriptorTicket(&budget);
  if (close_oldest_idle() && budget.try_take()) return DescriptorTicket(&budget);
  budget.count_refusal();
  const auto now = Clock::now();
  budget_refused_at_ = now;
  if (!budget_retry_armed_) arm_budget_retry();
  if (now >= next_budget_log_) {
    next_budget_log_ = now + kLogEvery;
    spdlog::warn(
        "upstream {}: the {} descriptors for upstream connections are in use; requests wait "
        "for one (up to connect_timeout_ms), the rest are kept for Redis, the admin listener "
        "and health checks",
        upstream.name, budget.limit());
  }
  return {};
}

bool UpstreamPools::close_oldest_idle() {
  ServerState* oldest = nullptr;
  for_each_server([&](ServerState& server) {
    if (server.idle.empty()) return;
    if (!oldest || server.idle.front()->idle_since < oldest->idle.front()->idle_since) {
      oldest = &server;
    }
  });
  if (!oldest) return false;
  oldest->idle.pop_front();  // its descriptor goes back to the budget
  return true;
}

// A request refused a descriptor waits in its server's queue, which only this
// worker's connections to that server wake. Descriptors freed by another
// worker or another server are noticed here: every kBudgetRetryEvery, while
// requests wait and the last refusal is recent, they are all woken to try
// again if the budget has room (one that still finds none waits on, within
// its own deadline).
void UpstreamPools::arm_budget_retry() {
  budget_retry_armed_ = true;
  budget_retry_timer_.expires_after(kBudgetRetryEvery);
  budget_retry_timer_.async_wait([this](boost::beast::error_code ec) {
    if (ec) return;
    budget_retry_armed_ = false;
    const auto& budget = connection_budget();
    const bool room = budget.in_use() < budget.limit();
    bool waiting = false;
    for_each_server([&](ServerState& server) {
      if (server.slots->waiters.empty()) return;
      waiting = true;
      if (room) wake_all_waiters(executor_, server.slots);
    });
    if (waiting && Clock::now() < budget_refused_at_ + kBudgetRetryFor) arm_budget_retry();
  });
}

void UpstreamPools::wait_for_slot(const UpstreamConfig& upstream, std::size_t server,
                                  std::function<bool(bool take)> waiter) {
  auto& slots = *server_state(upstream, upstream.servers[server]).slots;
  // Requests that gave up (connect_timeout, the client left) stay queued
  // until a connection frees up; while every slot is held for long (WebSocket
  // tunnels) that may be never, so the queue is trimmed whenever it doubles.
  if (slots.waiters.size() >= slots.trim_at) {
    std::erase_if(slots.waiters, [](const auto& w) { return !w(false); });
    slots.trim_at = std::max<std::size_t>(64, 2 * slots.waiters.size());
  }
  slots.waiters.push_back(std::move(waiter));
}

// Posted, never run inside the caller: the waiter starts I/O of its own.
void UpstreamPools::wake_waiter(const WorkerExecutor& executor,
                                const std::shared_ptr<ServerSlots>& slots) {
  ++slots->wakes;  // one waiter may go per freed connection
  if (slots->wake_posted) return;
  slots->wake_posted = true;
  boost::asio::post(executor, [slots] {
    slots->wake_posted = false;
    while (slots->wakes > 0 && !slots->waiters.empty()) {
      auto waiter = std::move(slots->waiters.front());
      slots->waiters.pop_front();
      if (waiter(true)) --slots->wakes;
    }
    slots->wakes = 0;
  });
}

// Every request waiting for a connection to the server gets a turn.
void UpstreamPools::wake_all_waiters(const WorkerExecutor& executor,
                                     const std::shared_ptr<ServerSlots>& slots) {
  if (slots->waiters.empty()) return;
  slots->wakes += slots->waiters.size();
  wake_waiter(executor, slots);
}

bool UpstreamPools::quiet(UpstreamConnection& conn) {
  auto& socket = conn.stream.socket();
  if (!socket.is_open() || conn.buffer.size() != 0) return false;
  if (conn.stream.is_tls()) {
    // Records that are not data (a session ticket) are taken in by the peek.
    const TlsSocket::Attempt peek = conn.stream.tls_session().attempt_peek();
    return peek.want == TlsSocket::Want::kRead && !peek.ec;
  }
  char byte;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n >= 0) return false;  // 0: the server closed it; > 0: bytes nobody asked for
  return errno == EAGAIN || errno == EWOULDBLOCK;
}

UpstreamPools::UpstreamState& UpstreamPools::upstream_state(const UpstreamConfig& upstream) {
  if (recent_upstream_.name && *recent_upstream_.name == upstream.name) {
    return *recent_upstream_.state;
  }
  auto& entry = *upstreams_.try_emplace(upstream.name).first;
  recent_upstream_ = {&entry.first, &entry.second};
  return entry.second;
}

UpstreamPools::ServerState& UpstreamPools::server_state(const UpstreamConfig& upstream,
                                                        const HostPort& server) {
  RecentServer& recent =
      recent_[(reinterpret_cast<std::uintptr_t>(&server) / alignof(HostPort)) % recent_.size()];
  if (recent.server == &server && recent.key->port == server.port &&
      recent.key->host == server.host && *recent.name == upstream.name) {
    return *recent.state;
  }
  auto& servers = upstream_state(upstream).servers;
  auto it = servers.find(ServerKey{server.host, server.port});
  if (it == servers.end()) {
    it = servers.emplace(StoredKey{server.host, server.port}, ServerState{}).first;
    it->second.health = health_->find(upstream.name, server);
  }
  recent = {&server, recent_upstream_.name, &it->first, &it->second};
  return it->second;
}

void UpstreamPools::set_health(std::shared_ptr<const UpstreamHealth> health) {
  health_ = std::move(health);
  for (auto& [name, upstream] : upstreams_) {
    for (auto& [key, server] : upstream.servers) {
      server.health = health_->find(name, HostPort{key.host, key.port});
    }
  }
}

bool UpstreamPools::any_unhealthy(const UpstreamConfig& upstream) {
  return std::any_of(upstream.servers.begin(), upstream.servers.end(),
                     [&](const HostPort& s) { return server_state(upstream, s).unhealthy(); });
}

std::unique_ptr<UpstreamConnection> UpstreamPools::take_idle(const UpstreamConfig& upstream,
                                                             std::size_t server) {
  auto& state = server_state(upstream, upstream.servers[server]);
  // Most recently used first: it is the least likely to have been closed.
  while (!state.idle.empty()) {
    auto conn = std::move(state.idle.back());
    state.idle.pop_back();
    // Bytes may have arrived since the last sweep: never reuse it then. Nor
    // one made under other TLS settings (a reload).
    if (UpstreamTls::same(conn->tls, upstream.tls.get()) && quiet(*conn)) {
      conn->ack_pending = false;  // the request about to be sent carries the ACK
      return conn;
    }
    boost::beast::error_code ignored;
    conn->stream.socket().close(ignored);
  }
  return nullptr;
}

void UpstreamPools::give_back(const UpstreamConfig& upstream,
                              std::unique_ptr<UpstreamConnection> conn) {
  // A server removed by a reload gets no pool.
  auto it = std::find_if(upstream.servers.begin(), upstream.servers.end(), [&](const HostPort& s) {
    return s.host == conn->address.host && s.port == conn->address.port;
  });
  if (it == upstream.servers.end()) return;
  auto& state = server_state(upstream, *it);
  state.keep_idle = upstream.max_idle_connections;
  if (upstream.max_idle_connections == 0) {
    state.idle.clear();  // a reload turned pooling off: none stays
    return;
  }
  if (!conn->stream.socket().is_open() || conn->buffer.size() != 0) return;
  // Beyond the pool's size only while the process's upstream descriptors are
  // far from used up: other workers may need them more than the next burst.
  if (state.idle.size() >= upstream.max_idle_connections) {
    const auto& budget = connection_budget();
    if (budget.in_use() > budget.limit() / 4 * 3) return;
  }
  conn->stream.tcp().expires_never();
  conn->idle_since = Clock::now();
  conn->ack_pending = true;
  if (!state.slots->waiters.empty()) wake_waiter(executor_, state.slots);  // an idle one to take
  // One beyond the pool's size is a burst's: it keeps no read buffer while it
  // waits (a burst of thousands would hold their buffers for the grace).
  if (state.idle.size() >= upstream.max_idle_connections) conn->buffer.shrink_to_fit();
  state.idle.push_back(std::move(conn));
  if (!sweep_armed_) arm_sweep();
  if (!ack_armed_) arm_ack();
}

// The kernel acknowledges what was read lazily (delayed ACK, up to ~40 ms),
// and a server whose further bytes wait for that ACK (Nagle) would send them
// only then, possibly after the connection was reused. So a connection idle
// for kAckAfter gets an immediate ACK: bytes held back that way arrive while
// it is idle here, where take_idle() and the sweep see them. One taken sooner
// needs none: the request sent on it carries the ACK. (Acknowledging on every
// give_back instead costs a system call and a packet per exchange.)
void UpstreamPools::arm_ack() {
  ack_armed_ = true;
  ack_timer_.expires_after(kAckAfter);
  ack_timer_.async_wait([this](boost::beast::error_code ec) {
    if (ec) return;
    ack_armed_ = false;
    const auto due = Clock::now() - kAckAfter;
    bool any_pending = false;
    const int one = 1;
    for_each_server([&](ServerState& server) {
      for (auto& conn : server.idle) {
        if (!conn->ack_pending) continue;
        if (conn->idle_since > due) {
          any_pending = true;
          continue;
        }
        conn->ack_pending = false;
        ::setsockopt(conn->stream.socket().native_handle(), IPPROTO_TCP, TCP_QUICKACK, &one,
                     sizeof one);
      }
    });
    if (any_pending) arm_ack();
  });
}

// Idle connections are checked once per kSweepEvery rather than watched one by
// one (a watch costs a reactor registration and a cancel per exchange):
// whatever became readable while idle (the server's close, stray bytes) is
// closed here, and take_idle() checks again before any reuse.
void UpstreamPools::arm_sweep() {
  sweep_armed_ = true;
  sweep_timer_.expires_after(kSweepEvery);
  sweep_timer_.async_wait([this](boost::beast::error_code ec) {
    if (ec) return;
    sweep_armed_ = false;
    bool any_left = false;
    const auto surplus_due = Clock::now() - kSurplusGrace;
    std::size_t surplus = 0;
    for_each_server([&](ServerState& server) {
      std::erase_if(server.idle, [](const auto& conn) { return !quiet(*conn); });
      while (server.idle.size() > server.keep_idle &&
             server.idle.front()->idle_since <= surplus_due) {
        server.idle.pop_front();
        ++surplus;
      }
      any_left = any_left || !server.idle.empty();
    });
    if (surplus > 0 && surplus_closed_) surplus_closed_(surplus);
    if (any_left) arm_sweep();
  });
}

TlsSessionRef UpstreamPools::tls_session(const UpstreamConfig& upstream, std::size_t server) {
  auto& state = server_state(upstream, upstream.servers[server]);
  return UpstreamTls::same(state.tls_session_of.get(), upstream.tls.get()) ? state.tls_session
                                                                          : nullptr;
}

void UpstreamPools::keep_tls_session(const UpstreamConfig& upstream, std::size_t server,
                                     TlsSessionRef session) {
  auto& state = server_state(upstream, upstream.servers[server]);
  state.tls_session = std::move(session);
  state.tls_session_of = upstream.tls;
}

void UpstreamPools::mark_failed(const UpstreamConfig& upstream, std::size_t server) {
  auto& state = server_state(upstream, upstream.servers[server]);
  state.cooldown_until = Clock::now() + upstream.fail_cooldown;
  state.idle.clear();
}

void UpstreamPools::mark_ok(const UpstreamConfig& upstream, std::size_t server) {
  server_state(upstream, upstream.servers[server]).cooldown_until = {};
}

std::shared_ptr<H2Connection> UpstreamPools::h2_connection(const UpstreamConfig& upstream,
                                                           std::size_t server) {
  auto& state = server_state(upstream, upstream.servers[server]);
  // Closed ones go; those of another protocol or other TLS settings (a
  // reload's) take no new stream and close once their streams are done, so
  // that their max_connections slots come back then.
  std::erase_if(state.h2, [&](const std::shared_ptr<H2Connection>& c) {
    if (!c->usable()) return true;
    if (c->h2c() != (upstream.protocol == UpstreamProtocol::kH2c) ||
        !UpstreamTls::same(c->tls(), upstream.tls.get())) {
      c->retire();
      return true;
    }
    return false;
  });
  for (const auto& c : state.h2) {
    if (c->has_room()) return c;
  }
  return nullptr;
}

void UpstreamPools::add_h2(const UpstreamConfig& upstream, std::size_t server,
                           std::shared_ptr<H2Connection> conn) {
  auto& state = server_state(upstream, upstream.servers[server]);
  // Requests waiting for room on a connection to the server look again when
  // a stream of this one ends, or its SETTINGS let more in (`all`).
  conn->set_on_room([executor = executor_, slots = state.slots](bool all) {
    if (all) return wake_all_waiters(executor, slots);
    if (!slots->waiters.empty()) wake_waiter(executor, slots);
  });
  state.h2.push_back(std::move(conn));
  // Requests waiting for a connection to the server may all share this one.
  wake_all_waiters(executor_, state.slots);
}

void UpstreamPools::clear() {
  for_each_server([](ServerState& server) {
    server.idle.clear();
    for (auto& c : server.h2) c->close();
    server.h2.clear();
  });
  sweep_timer_.cancel();
  ack_timer_.cancel();
}

}  // namespace sluice
