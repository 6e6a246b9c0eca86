// Upstream configuration: the part of the config the upstream layer sees.
// It knows nothing of routes and limits.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

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

struct UpstreamConfig {
  std::string name;
  std::vector<HostPort> servers;  // round robin; a failing server is skipped for a cool-down
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds response_timeout{
      30000};                                     // to the response head, and between body reads
  std::size_t max_idle_connections = 64;          // per worker and server
  std::chrono::milliseconds fail_cooldown{2000};  // extension: upstreams.NAME.fail_cooldown_ms
  // Connections (busy and idle) per worker and server; 0 = no limit. A request
  // that finds none free waits up to connect_timeout for one, then gets 503.
  std::size_t max_connections = 0;
};

}  // namespace sluice
