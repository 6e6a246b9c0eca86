#include "gateway/route_split.hpp"

#include "upstream/balance/stable_hash.hpp"

namespace sluice {

std::size_t split_side_for_key(const TrafficSplit& split, std::uint64_t key) {
  if (split.total_weight == 0) return 0;
  const std::uint64_t at = scale_draw(mix64(key), split.total_weight);
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < split.upstreams.size(); ++i) {
    end += split.upstreams[i].weight;
    if (at < end) return i;
  }
  return split.upstreams.size() - 1;  // not reached
}

std::vector<std::int64_t>& RouteSplits::current_for(const std::shared_ptr<const Config>& config,
                                                    std::size_t route_index) {
  State* state = nullptr;
  for (State& s : states_) {
    if (!s.config.owner_before(config) && !config.owner_before(s.config) && !s.config.expired()) {
      state = &s;
    }
  }
  if (!state) {
    state = states_[0].used <= states_[1].used ? &states_[0] : &states_[1];
    state->config = config;
    state->current.assign(config->routes.size(), {});
  }
  state->used = ++uses_;
  if (route_index >= state->current.size()) state->current.resize(route_index + 1);
  return state->current[route_index];
}

const UpstreamConfig& RouteSplits::upstream_for(const std::shared_ptr<const Config>& owner,
                                                const RouteConfig& route,
                                                std::optional<std::uint64_t> key) {
  const Config& config = *owner;
  const TrafficSplit& split = route.split;
  if (split.upstreams.empty()) return config.upstreams[route.upstream_index];
  if (key && split.split_on) {
    return config.upstreams[split.upstreams[split_side_for_key(split, *key)].index];
  }
  const auto route_index = static_cast<std::size_t>(&route - config.routes.data());
  auto& current = current_for(owner, route_index);
  sides_.clear();
  for (const auto& side : split.upstreams) sides_.push_back({side.weight > 0, side.weight, 0});
  const auto side = pick_round_robin(sides_, current);
  return config.upstreams[split.upstreams[side.value_or(0)].index];
}

}  // namespace sluice
