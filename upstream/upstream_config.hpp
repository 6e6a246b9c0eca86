// Upstream configuration: the part of the config the upstream layer sees.
// It knows nothing of routes and limits.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

struct UpstreamConfig {
  std::string name;
  std::vector<HostPort> servers;  // round robin; a failing server is skipped for a cool-down
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
  // TLS to its servers (upstreams.NAME.tls), as configured and as built;
  // both absent: plain TCP.
  std::optional<UpstreamTlsConfig> tls_config;
  std::shared_ptr<const UpstreamTls> tls;
  UpstreamProtocol protocol = UpstreamProtocol::kHttp1;
  bool http2() const { return protocol != UpstreamProtocol::kHttp1; }
};

}  // namespace sluice
