#include "gateway/route_split.hpp"

#include "upstream/balance/stable_hash.hpp"

namespace sluice {

std::size_t split_side_for_key(const TrafficSplit& split, std::uint64_t key) {
  if (split.total_weight == 0) return 0;
  const auto at = static_cast<std::uint64_t>(
      (static_cast<unsigned __int128>(mix64(key)) * split.total_weight) >> 64);
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < split.upstreams.size(); ++i) {
    end += split.upstreams[i].weight;
    if (at < end) return i;
  }
  return split.upstreams.size() - 1;  // not reached
}

const UpstreamConfig& RouteSplits::upstream_for(const Config& config, const RouteConfig& route,
                                                std::optional<std::uint64_t> key) {
  const TrafficSplit& split = route.split;
  if (split.upstreams.empty()) return config.upstreams[route.upstream_index];
  if (key && split.split_on) {
    return config.upstreams[split.upstreams[split_side_for_key(split, *key)].index];
  }
  if (config_ != &config) {
    config_ = &config;
    current_.assign(config.routes.size(), {});
  }
  const auto route_index = static_cast<std::size_t>(&route - config.routes.data());
  if (route_index >= current_.size()) current_.resize(config.routes.size());
  sides_.clear();
  for (const auto& side : split.upstreams) sides_.push_back({side.weight > 0, side.weight, 0});
  const auto side = pick_round_robin(sides_, current_[route_index]);
  return config.upstreams[split.upstreams[side.value_or(0)].index];
}

}  // namespace sluice
