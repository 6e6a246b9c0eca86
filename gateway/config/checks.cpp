#include "gateway/config/checks.hpp"

#include <re2/re2.h>

namespace sluice {
namespace {

using PathKind = RouteMatch::PathKind;

// Request paths always start with "/", so these patterns match every path.
bool matches_everything(const RouteMatch& m) {
  switch (m.path_kind) {
    case PathKind::kPrefix:
      return m.path == "/";
    case PathKind::kRegex:
      return m.path == ".*" || m.path == "/.*";
    case PathKind::kExact:
      return false;
  }
  return false;
}

bool paths_cover(const RouteMatch& outer, const RouteMatch& inner) {
  if (matches_everything(outer)) return true;
  switch (outer.path_kind) {
    case PathKind::kPrefix:
      // A longer prefix or an exact path under the prefix; a regex is not
      // bounded by a prefix in general.
      return inner.path_kind != PathKind::kRegex && inner.path.starts_with(outer.path);
    case PathKind::kExact:
      return inner.path_kind == PathKind::kExact && inner.path == outer.path;
    case PathKind::kRegex:
      if (inner.path_kind == PathKind::kRegex) return inner.path == outer.path;
      if (inner.path_kind == PathKind::kExact && outer.regex) {
        return RE2::FullMatch(inner.path, *outer.regex);
      }
      return false;
  }
  return false;
}

}  // namespace

bool route_match_covers(const RouteMatch& outer, const RouteMatch& inner) {
  // Hosts are stored lower-case without a trailing dot; empty = any host.
  const bool host_covered = outer.host.empty() || outer.host == inner.host;
  // Request matchers narrow a route: one with them may let requests pass.
  return host_covered && outer.request.empty() && paths_cover(outer, inner);
}

std::vector<MethodBypass> find_method_bypasses(const Config& config) {
  std::vector<MethodBypass> out;
  const auto& routes = config.routes;
  for (std::size_t i = 0; i < routes.size(); ++i) {
    const auto& limited = routes[i];
    if (limited.limit_indexes.empty() || limited.match.methods.empty()) continue;
    // The first later route that takes any method on all of these paths gets
    // every method this route does not list. A route listing its own methods
    // was given them on purpose, and takes only those.
    for (std::size_t j = i + 1; j < routes.size(); ++j) {
      const auto& later = routes[j];
      if (!later.match.methods.empty() || !route_match_covers(later.match, limited.match)) {
        continue;
      }
      if (later.limit_indexes.empty()) out.push_back({i, j});
      break;
    }
  }
  return out;
}

}  // namespace sluice
