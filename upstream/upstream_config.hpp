// Upstream configuration: the part of the config the upstream layer sees.
// It knows nothing of routes and limits.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "upstream/balance/outlier.hpp"
#include "upstream/retry/retry_budget.hpp"
#include "upstream/balance/server_pick.hpp"
#include "upstream/upstream_tls.hpp"

namespace sluice {

struct HostPort {
  std::string host;  // IP literal or name (resolved at startup)
  std::uint16_t port = 0;
  // "host:port", with an IPv6 host in brackets ("[::1]:8080").
  std::string to_string() const {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }
};

// Active health checks of every server of an upstream (upstreams.NAME.health_check).
struct HealthCheckConfig {
  std::string path;  // the target of the GET, starting with "/"
  std::chrono::milliseconds interval{5000};
  std::chrono::milliseconds timeout{1000};  // connect to status line; less than interval
  unsigned healthy_threshold = 2;           // consecutive good checks that make it healthy
  unsigned unhealthy_threshold = 3;         // consecutive failed checks that make it unhealthy
  std::vector<unsigned> expected_status{200};
  bool operator==(const HealthCheckConfig&) const = default;
};

// How requests go to an upstream's servers (upstreams.NAME.protocol).
enum class UpstreamProtocol {
  kHttp1,  // HTTP/1.1, a pooled connection per request in flight (plain or TLS)
  kH2c,    // HTTP/2 with prior knowledge over plain TCP, streams multiplexed
  kH2,     // HTTP/2 over TLS (ALPN h2), streams multiplexed
};

// Where a hash-balanced request's key is read (upstreams.NAME.hash_on): a
// request header, a cookie, the client address or the request path.
struct HashOn {
  enum class Source { kHeader, kCookie, kIp, kPath };
  Source source = Source::kIp;
  std::string name;  // the header's or cookie's name
  bool operator==(const HashOn&) const = default;
};

// A number no other upstream configuration of the process has: a worker's
// per-upstream state made for one configuration is known again by it.
inline std::uint64_t next_upstream_generation() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

struct UpstreamConfig {
  std::string name;
  std::uint64_t generation = next_upstream_generation();
  // Chosen by `balance` among the usable ones; a failing server is skipped
  // for a cool-down.
  std::vector<HostPort> servers;
  std::vector<unsigned> weights;  // per server, in the same order; 1 when not given
  BalancePolicy balance = BalancePolicy::kRoundRobin;
  std::optional<HashOn> hash_on;             // balance hash: the request's key
  std::shared_ptr<const MaglevTable> ring;   // balance hash: the servers' table
  unsigned weight(std::size_t server) const {
    return server < weights.size() ? weights[server] : 1;
  }
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds response_timeout{
      30000};                                     // to the response head, and between body reads
  std::size_t max_idle_connections = 64;          // per worker and server
  std::chrono::milliseconds fail_cooldown{2000};  // extension: upstreams.NAME.fail_cooldown_ms
  // Connections (busy and idle) per worker and server; 0 = no bound but the
  // process's upstream descriptor budget; absent = the budget's default
  // (ConnectionBudget::default_per_server). A request that finds none free
  // waits up to connect_timeout for one, then gets 503.
  std::optional<std::size_t> max_connections;
  // Absent: no active checks, every server counts as healthy.
  std::optional<HealthCheckConfig> health_check;
  // Absent: no passive outlier detection (upstream/balance/outlier.hpp).
  std::optional<OutlierConfig> outlier_detection;
  // How many retries its routes' policies may have in flight (upstream/retry/retry_budget.hpp).
  RetryBudgetConfig retry_budget;
  // TLS to its servers (upstreams.NAME.tls), as configured and as built;
  // both absent: plain TCP.
  std::optional<UpstreamTlsConfig> tls_config;
  std::shared_ptr<const UpstreamTls> tls;
  UpstreamProtocol protocol = UpstreamProtocol::kHttp1;
  bool http2() const { return protocol != UpstreamProtocol::kHttp1; }
};

}  // namespace sluice
