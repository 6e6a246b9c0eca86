#include "gateway/config/config.hpp"

#include <algorithm>

namespace sluice {

const BucketParams& LimitConfig::for_plan(std::string_view plan) const {
  const auto it = plans.find(std::string(plan));
  return it == plans.end() ? bucket : it->second;
}

const UpstreamConfig* Config::find_upstream(std::string_view name) const {
  const auto it = std::find_if(upstreams.begin(), upstreams.end(),
                               [&](const UpstreamConfig& u) { return u.name == name; });
  return it == upstreams.end() ? nullptr : &*it;
}

const LimitConfig* Config::find_limit(std::string_view name) const {
  const auto it = std::find_if(limits.begin(), limits.end(),
                               [&](const LimitConfig& l) { return l.name == name; });
  return it == limits.end() ? nullptr : &*it;
}

std::string_view to_string(RedisConfig::Topology topology) noexcept {
  switch (topology) {
    case RedisConfig::Topology::kStandalone:
      return "standalone";
    case RedisConfig::Topology::kSentinel:
      return "sentinel";
    case RedisConfig::Topology::kCluster:
      return "cluster";
  }
  return "standalone";
}

}  // namespace sluice
