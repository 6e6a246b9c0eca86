// The network endpoints a configuration uses, as one line of JSON, for
// `sluice --check --print-endpoints` (scripts decide from it which demo
// upstreams and which Redis to start). It holds addresses only, as configured
// (host names are not resolved), never credentials: no Redis user, password or
// database, no API key.
#pragma once

#include <string>

#include "gateway/config/config.hpp"

namespace sluice {

// {"listen":"127.0.0.1:8080","admin_listen":"127.0.0.1:9901",
//  "redis":{"host":"127.0.0.1","port":6379,"tls":false},
//  "upstreams":{"demo":[{"host":"127.0.0.1","port":9000}]}}
// "redis" is null when no route has limits: Sluice then never connects to it.
// Upstreams are in file order; each server list in its configured order.
std::string endpoints_json(const Config& config);

}  // namespace sluice
