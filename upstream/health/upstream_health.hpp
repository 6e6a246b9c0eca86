// The health of the actively checked upstream servers (and of those under
// outlier detection), shared with the workers without a lock. Each such
// server has a ServerHealth whose healthy flag only the main thread writes
// (from its checker's results) and any worker reads; its outlier state is
// written by the workers' reports (atomics). An UpstreamHealth is the immutable table of those flags for one
// configuration, keyed by upstream name and server; a reload builds a new
// table that keeps the flag of every server checked before and after, and
// hands it to each worker on the worker's own thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>

#include "upstream/balance/outlier.hpp"
#include "upstream/upstream_config.hpp"

namespace sluice {

struct ServerHealth {
  std::atomic<bool> healthy{true};  // servers start healthy (active checks)
  OutlierState outlier;             // passive: ejected by its errors in a row
  bool is_healthy() const { return healthy.load(std::memory_order_relaxed); }
};

class UpstreamHealth {
 public:
  void add(std::string_view upstream, const HostPort& server, std::shared_ptr<ServerHealth> flag) {
    flags_[Key{std::string(upstream), server.host, server.port}] = std::move(flag);
  }
  // The flag of a checked server (or one under outlier detection); null
  // when the server is neither.
  std::shared_ptr<ServerHealth> find(std::string_view upstream, const HostPort& server) const {
    const auto it = flags_.find(Key{std::string(upstream), server.host, server.port});
    return it == flags_.end() ? nullptr : it->second;
  }
  bool empty() const { return flags_.empty(); }

 private:
  using Key = std::tuple<std::string, std::string, std::uint16_t>;
  std::map<Key, std::shared_ptr<ServerHealth>> flags_;
};

}  // namespace sluice
