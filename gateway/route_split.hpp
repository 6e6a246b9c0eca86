// Which upstream a request of a route with a split goes to (routes[].upstreams):
// by the route's weights, exactly within each worker (smooth weighted round
// robin over the route's requests, as upstream servers are balanced), or,
// with split_on, by the hash of the request's key over the weights, so that
// a key stays on one side on every worker and every instance. One per
// worker; used on its thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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
  const UpstreamConfig& upstream_for(const std::shared_ptr<const Config>& config,
                                     const RouteConfig& route, std::optional<std::uint64_t> key);

 private:
  // The round robin's running weights of one configuration, per route. Two
  // are kept: while a reload's old configuration finishes its requests, the
  // old and the new each go by their own. Known by a weak owner: a
  // configuration made later, even at a freed one's address, never passes
  // for an earlier one.
  struct State {
    std::weak_ptr<const Config> config;
    std::vector<std::vector<std::int64_t>> current;
    std::uint64_t used = 0;  // when last taken (the least recently used one goes)
  };
  std::vector<std::int64_t>& current_for(const std::shared_ptr<const Config>& config,
                                         std::size_t route_index);

  State states_[2];
  std::uint64_t uses_ = 0;
  std::vector<PickServer> sides_;  // reused
};

}  // namespace sluice
