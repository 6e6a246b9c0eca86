// How to reach one Redis server and the client's timing: plain values, filled
// by the gateway from its config. Two equal Options describe the same connection.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::redis {

// How the Redis deployment is laid out (config redis.topology).
enum class Topology {
  kStandalone,  // one server at host:port
  kSentinel,    // the primary named sentinel_master, found through the sentinels
  kCluster,     // a Redis Cluster; host:port and nodes are seeds
};

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  bool operator==(const Endpoint&) const = default;
};

struct Options {
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

  // The handshake also sends ROLE and fails unless the server is a primary
  // ("master"): how a Sentinel client checks the address it was given.
  bool require_primary = false;

  // Topology. For kSentinel, host:port and `nodes` are the sentinels; for
  // kCluster they are the seed nodes. Credentials, db, TLS and timings above
  // apply to every data node.
  Topology topology = Topology::kStandalone;
  std::vector<Endpoint> nodes;      // further sentinels or seed nodes
  std::string sentinel_master;      // kSentinel: the monitored primary's name
  std::string sentinel_user;        // kSentinel: the sentinels' own ACL user ...
  std::string sentinel_password;    // ... and password (empty = no AUTH)
  // kCluster: the slot map is also refreshed this often without any trigger.
  std::chrono::milliseconds topology_refresh{10000};

  bool operator==(const Options&) const = default;
};

}  // namespace sluice::redis
