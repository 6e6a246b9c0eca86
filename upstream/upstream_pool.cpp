#include "upstream/upstream_pool.hpp"

#include <sys/socket.h>

#include <algorithm>

namespace sluice {
namespace {

// A connection idle for less than this is reused without a probe: servers do
// not close keep-alive connections that fast, and the probe is a syscall.
constexpr auto kProbeAfterIdle = std::chrono::milliseconds(500);

// True when a pooled socket is still open and has nothing unexpected to read.
bool still_usable(UpstreamConnection& conn, UpstreamPools::Clock::time_point now) {
  auto& socket = conn.stream.socket();
  if (!socket.is_open()) return false;
  if (now - conn.idle_since < kProbeAfterIdle) return true;
  char byte;
  ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return false;  // the server closed it
  if (n > 0) return false;   // stray bytes: the stream is out of step
  return errno == EAGAIN || errno == EWOULDBLOCK;
}

}  // namespace

UpstreamPools::ServerState& UpstreamPools::server_state(const UpstreamConfig& upstream,
                                                        const HostPort& server) {
  auto& servers = upstreams_[upstream.name].servers;
  auto it = servers.find(ServerKey{server.host, server.port});
  if (it == servers.end()) {
    it = servers.emplace(StoredKey{server.host, server.port}, ServerState{}).first;
  }
  return it->second;
}

std::optional<std::size_t> UpstreamPools::pick(const UpstreamConfig& upstream,
                                               const std::vector<std::size_t>& tried) {
  const std::size_t n = upstream.servers.size();
  if (n == 0) return std::nullopt;
  auto& state = upstreams_[upstream.name];
  const auto now = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t candidate = (state.next + i) % n;
    if (std::find(tried.begin(), tried.end(), candidate) != tried.end()) continue;
    if (server_state(upstream, upstream.servers[candidate]).cooldown_until > now) continue;
    state.next = candidate + 1;
    return candidate;
  }
  return std::nullopt;
}

std::unique_ptr<UpstreamConnection> UpstreamPools::take_idle(const UpstreamConfig& upstream,
                                                             std::size_t server) {
  auto& state = server_state(upstream, upstream.servers[server]);
  // Most recently used first: it is the least likely to have been closed.
  const auto now = Clock::now();
  while (!state.idle.empty()) {
    auto conn = std::move(state.idle.back());
    state.idle.pop_back();
    if (still_usable(*conn, now)) {
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
  if (it == upstream.servers.end() || upstream.max_idle_connections == 0) return;
  auto& state = server_state(upstream, *it);
  conn->stream.expires_never();
  conn->idle_since = Clock::now();
  state.idle.push_back(std::move(conn));
  while (state.idle.size() > upstream.max_idle_connections) state.idle.pop_front();
}

void UpstreamPools::mark_failed(const UpstreamConfig& upstream, std::size_t server) {
  auto& state = server_state(upstream, upstream.servers[server]);
  state.cooldown_until = Clock::now() + upstream.fail_cooldown;
  state.idle.clear();
}

void UpstreamPools::mark_ok(const UpstreamConfig& upstream, std::size_t server) {
  server_state(upstream, upstream.servers[server]).cooldown_until = {};
}

void UpstreamPools::clear() {
  upstreams_.clear();
}

}  // namespace sluice
