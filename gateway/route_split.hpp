// Which upstream a request of a route with a split goes to (routes[].upstreams):
// by the route's weights, exactly within each worker (smooth weighted round
// robin over the route's requests, as upstream servers are balanced), or,
// with split_on, by the hash of the request's key over the weights, so that
// a key stays on one side on every worker and every instance. One per
// worker; used on its thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "gateway/config/config.hpp"

namespace sluice {

// The side of `split` that `key` falls on: the key's hash spread over the
// weights in order, so that moving weight from one side to the next moves
// only the keys in between. Pure.
std::size_t split_side_for_key(const TrafficSplit& split, std::uint64_t key);

class RouteSplits {
 public:
  // The upstream for a request of `route` (of `config`): the route's one
  // upstream, or its split's choice. `key`: the request's split_on key (none:
  // the request lacks it, or the split has none).
  const UpstreamConfig& upstream_for(const Config& config, const RouteConfig& route,
                                     std::optional<std::uint64_t> key);

 private:
  const Config* config_ = nullptr;              // the configuration current_ is for
  std::vector<std::vector<std::int64_t>> current_;  // per route: the round robin's weights
  std::vector<PickServer> sides_;               // reused
};

}  // namespace sluice
