// Checks over a parsed, valid configuration that find setups which are valid
// but probably not what was meant; the second pass (resolve.hpp) turns their
// findings into --check warnings. Pure functions of the config: no I/O.
#pragma once

#include <cstddef>
#include <vector>

#include "gateway/config/config.hpp"

namespace sluice {

// True when every request that `inner` matches on path and host is also
// matched by `outer` on path and host (methods are not compared). Decided
// exactly for path_prefix and path_exact; a path_regex route covers only the
// same pattern, a path_exact it matches, or everything when it is ".*" or "/.*".
// A route with request matchers (headers, query, cookies) covers nothing.
bool route_match_covers(const RouteMatch& outer, const RouteMatch& inner);

// A limited route that lists methods, and the first later route that takes
// every method on all of its paths and hosts but has no limits: requests with
// any other method (TRACE, PURGE, a lower-case "get") fall through to it and
// reach the upstream unlimited. Indexes into Config::routes.
struct MethodBypass {
  std::size_t limited = 0;
  std::size_t unlimited = 0;
};

std::vector<MethodBypass> find_method_bypasses(const Config& config);

}  // namespace sluice
