// Which of a route's requests are mirrored (routes[].mirror): the policy's
// share, exactly over the route's requests on each worker (a running credit,
// as the split's weights), and no more than max_in_flight mirrored requests
// of the route at once on the worker. One per worker; used on its thread only.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "gateway/config/traffic_config.hpp"

namespace sluice {

// A copy under way, as the worker sees it: it can be cut (a drain, a shutdown).
class MirrorCopyHandle {
 public:
  virtual void cut() = 0;

 protected:
  ~MirrorCopyHandle() = default;
};

class RouteMirrors {
 public:
  enum class Take {
    kNo,         // not in the share
    kMirror,     // mirrored: counted in flight until released
    kSkipped,    // in the share, but max_in_flight are under way
  };
  // Whether this request of route `route_name` (whose policy is `policy`) is
  // mirrored.
  Take take(const std::string& route_name, const MirrorPolicy& policy);
  // A mirrored request of the route ended.
  void release(const std::string& route_name);
  std::size_t in_flight(const std::string& route_name) const;

  // The copies under way, cut at once when the worker drains or closes
  // everything: a copy is disposable, and no shutdown waits for one.
  void add(MirrorCopyHandle* copy) { copies_.insert(copy); }
  void remove(MirrorCopyHandle* copy) { copies_.erase(copy); }
  void cut_all();

 private:
  struct State {
    double credit = 0;
    std::size_t in_flight = 0;
  };
  // By route name: a reload keeps a route's count (its requests in flight go on).
  std::unordered_map<std::string, State> routes_;
  std::unordered_set<MirrorCopyHandle*> copies_;
};

}  // namespace sluice
