// Route selection (spec sections 2 and 5): a pure function of the config and
// the request line. First route that matches path, host and method wins.
#pragma once

#include <string>
#include <string_view>

#include "gateway/config.hpp"

namespace sluice {

struct RouteDecision {
  enum class Kind { kMatched, kNotFound, kMethodNotAllowed };
  Kind kind = Kind::kNotFound;
  const RouteConfig* route = nullptr;  // set when kMatched
  std::string allow;                   // "GET, POST" when kMethodNotAllowed
};

// `target` is the request-target as received (path plus optional query);
// `host` is the Host header (a port, if any, is ignored; case-insensitive).
// If routes match path and host but none allows the method, the answer is
// kMethodNotAllowed with the union of their methods in `allow`.
RouteDecision select_route(const Config& config, std::string_view method, std::string_view target,
                           std::string_view host);

// The request-target to send upstream: with strip_prefix on a path_prefix
// route the matched prefix is removed (an empty path becomes "/"); the query
// string is kept. Otherwise the target is returned unchanged.
std::string upstream_target(const RouteConfig& route, std::string_view target);

// The path part of a request-target (before '?').
std::string_view target_path(std::string_view target);

// True when the path has a "." or ".." segment (raw or percent-encoded):
// prefix routes and upstreams would disagree on what it names.
bool has_dot_segment(std::string_view path);

}  // namespace sluice
