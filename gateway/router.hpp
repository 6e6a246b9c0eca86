// Route selection: a pure function of the config and the request. The first
// route whose path, host, method and request matchers (headers, query
// parameters, cookies) all match wins.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/config/config.hpp"

namespace sluice {

struct RouteDecision {
  enum class Kind { kMatched, kNotFound, kMethodNotAllowed };
  Kind kind = Kind::kNotFound;
  const RouteConfig* route = nullptr;  // set when kMatched
  std::string allow;                   // "GET, POST" when kMethodNotAllowed
};

// What request matchers read beyond the request line and Host: the query
// string as received, and each line of a header. A caller without them
// (none given) matches as if the request had no header and no query.
class MatchInput {
 public:
  virtual std::string_view query() const = 0;
  // Calls fn(value) for each line of header `name` (any case), in order.
  virtual void each_header(std::string_view name,
                           const std::function<void(std::string_view)>& fn) const = 0;

 protected:
  ~MatchInput() = default;
};

// Whether the request passes every one of the route's request matchers.
bool request_matches(const RequestMatchers& matchers, const MatchInput* input);

// `target` is the path to route on (the session passes the route path of
// gateway/request_target.hpp), optionally with a query; `host` is the Host header (a port, if any,
// is ignored; case-insensitive). If routes match path and host but none allows the method, the
// answer is kMethodNotAllowed with the union of their methods in `allow`.
RouteDecision select_route(const Config& config, std::string_view method, std::string_view target,
                           std::string_view host, const MatchInput* input = nullptr);

// The request-target to send upstream, from the forwarded target: with
// strip_prefix on a path_prefix route the matched prefix is removed (an empty
// path becomes "/"); the query string is kept. The prefix matched the route
// path, which has no ";parameters": it is removed from the forwarded path with
// the parameters inside it and those of the segment where it ends
// ("/api;v=1/x" with prefix "/api" becomes "/x"). Otherwise the target is
// returned unchanged.
std::string upstream_target(const RouteConfig& route, std::string_view target);
// The same rewrite, or nothing when the target goes upstream unchanged (the
// request path then forwards the client's own bytes without a copy).
std::optional<std::string> rewritten_target(const RouteConfig& route, std::string_view target);

// The path part of a request-target (before '?').
std::string_view target_path(std::string_view target);

}  // namespace sluice
