#include "gateway/mirror/route_mirrors.hpp"

#include <vector>

namespace sluice {

RouteMirrors::Take RouteMirrors::take(const std::string& route_name, const MirrorPolicy& policy) {
  State& state = routes_[route_name];
  state.credit += policy.percent;
  if (state.credit < 100) return Take::kNo;
  state.credit -= 100;
  if (state.in_flight >= policy.max_in_flight) return Take::kSkipped;
  ++state.in_flight;
  return Take::kMirror;
}

void RouteMirrors::release(const std::string& route_name) {
  const auto it = routes_.find(route_name);
  if (it != routes_.end() && it->second.in_flight > 0) --it->second.in_flight;
}

void RouteMirrors::cut_all() {
  // A cut copy may end (and leave the set) at once: cut a copy of the set.
  const std::vector<MirrorCopyHandle*> copies(copies_.begin(), copies_.end());
  for (auto* copy : copies) {
    if (copies_.count(copy)) copy->cut();
  }
}

std::size_t RouteMirrors::in_flight(const std::string& route_name) const {
  const auto it = routes_.find(route_name);
  return it == routes_.end() ? 0 : it->second.in_flight;
}

}  // namespace sluice
