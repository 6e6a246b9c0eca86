// The configuration of where a route's requests go: what a route matches
// (path, methods, host, and request headers, query parameters and cookies),
// and how its traffic is split between upstreams. Plain structs, as the rest
// of config.hpp; included by it.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "upstream/retry/retry_policy.hpp"
#include "upstream/upstream_config.hpp"

namespace re2 {
class RE2;
}

namespace sluice {

// A request header, query parameter or cookie a route matches on
// (routes[].match.headers, .query, .cookies): exactly one test, maybe
// inverted. A header sent in several lines is tested on its values joined
// with ","; a query parameter on its first, form-decoded value; a cookie on
// the first of its name.
struct ValueMatch {
  enum class Kind { kExact, kPrefix, kRegex, kPresent, kAbsent };
  std::string name;
  Kind kind = Kind::kPresent;
  std::string value;                      // kExact, kPrefix
  std::shared_ptr<const re2::RE2> regex;  // kRegex: the whole value must match
  bool invert = false;                    // matches when the test fails
};

struct RequestMatchers {
  std::vector<ValueMatch> headers;
  std::vector<ValueMatch> query;
  std::vector<ValueMatch> cookies;
  bool empty() const { return headers.empty() && query.empty() && cookies.empty(); }
};

struct RouteMatch {
  enum class PathKind { kPrefix, kExact, kRegex };
  PathKind path_kind = PathKind::kPrefix;
  std::string path = "/";
  std::shared_ptr<const re2::RE2> regex;  // set when path_kind == kRegex (RE2, whole path)
  std::vector<std::string> methods;         // empty = any method
  std::string host;  // empty = any host (compared without port, case-insensitive)
  RequestMatchers request;  // every one must match
};

// One side of a route's split (routes[].upstreams).
struct WeightedUpstream {
  std::string name;
  unsigned weight = 1;         // 0: none of the traffic (a canary not started)
  std::size_t index = 0;       // into Config::upstreams
};

// How a route's requests are shared between upstreams: by weight, each
// worker exactly (smooth weighted round robin over the route's requests),
// or sticky on a key (a header, a cookie, the client address) whose hash
// picks the side, the same for a key on every worker and instance.
struct TrafficSplit {
  std::vector<WeightedUpstream> upstreams;  // empty: the route's one upstream
  std::optional<HashOn> split_on;           // kHeader, kCookie or kIp
  unsigned total_weight = 0;
};

// A share of a route's requests copied to another upstream
// (routes[].mirror), whose answers are dropped.
struct MirrorPolicy {
  std::string upstream;
  std::size_t upstream_index = 0;  // into Config::upstreams
  double percent = 100;            // of the route's requests, exactly, per worker
  std::size_t max_in_flight = 32;  // mirrored requests in flight, per worker
  std::size_t max_body_bytes = 64 * 1024;  // a longer request body is not mirrored
};

// How long a route's exchanges may take (routes[].timeout_ms and
// idle_timeout_ms); zero: the upstream's own timeouts alone.
struct RouteTimeouts {
  std::chrono::milliseconds total{0};  // the whole exchange, to the response's end
  std::chrono::milliseconds idle{0};   // to the response head and between reads
};

}  // namespace sluice
