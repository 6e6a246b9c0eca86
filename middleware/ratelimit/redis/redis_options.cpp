#include "middleware/ratelimit/redis/redis_options.hpp"

namespace sluice {

redis::Options redis_options(const RedisConfig& c) {
  redis::Options o;
  o.host = c.host;
  o.port = c.port;
  o.user = c.user;
  o.password = c.password;
  o.db = c.db;
  o.tls = c.tls;
  o.ca_file = c.tls_ca_file;
  o.cert_file = c.tls_cert_file;
  o.key_file = c.tls_key_file;
  o.server_name = c.tls_server_name;
  o.connect_timeout = c.connect_timeout;
  o.command_timeout = c.timeout;
  switch (c.topology) {
    case RedisConfig::Topology::kStandalone:
      o.topology = redis::Topology::kStandalone;
      break;
    case RedisConfig::Topology::kSentinel:
      o.topology = redis::Topology::kSentinel;
      break;
    case RedisConfig::Topology::kCluster:
      o.topology = redis::Topology::kCluster;
      break;
  }
  for (const auto& node : c.nodes) o.nodes.push_back(redis::Endpoint{node.host, node.port});
  o.sentinel_master = c.sentinel_master;
  o.sentinel_user = c.sentinel_username;
  o.sentinel_password = c.sentinel_password;
  return o;
}

std::chrono::microseconds script_deadline_after(std::chrono::milliseconds timeout) {
  // A fifth of the timeout (10 ms of the default 50) is left for the answer
  // to travel back and for the error of the estimate of Redis' time.
  const std::chrono::microseconds t = timeout;
  return t - t / 5;
}

}  // namespace sluice
