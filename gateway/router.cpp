#include "gateway/router.hpp"

#include <algorithm>
#include <regex>
#include <utility>

#include "common/ascii.hpp"
#include "common/target_parts.hpp"
#include "gateway/request_target.hpp"

namespace sluice {
namespace {

// "Example.com:8080" -> "Example.com", "[::1]:80" -> "[::1]"; a trailing dot
// of a fully qualified name is dropped.
std::string_view host_without_port(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    const auto close = host.find(']');
    if (close != std::string_view::npos) return host.substr(0, close + 1);
    return host;
  }
  const auto colon = host.rfind(':');
  if (colon != std::string_view::npos) host = host.substr(0, colon);
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  return host;
}

bool path_matches(const RouteMatch& match, std::string_view path) {
  switch (match.path_kind) {
    case RouteMatch::PathKind::kPrefix:
      return path.starts_with(match.path);
    case RouteMatch::PathKind::kExact:
      return path == match.path;
    case RouteMatch::PathKind::kRegex:
      if (!match.regex) return false;
      try {
        return std::regex_match(path.begin(), path.end(), *match.regex);
      } catch (const std::regex_error&) {
        return false;  // too complex for this input: treat as no match
      }
  }
  return false;
}

bool host_matches(const RouteMatch& match, std::string_view request_host) {
  if (match.host.empty()) return true;
  return ascii::iequals(host_without_port(match.host), host_without_port(request_host));
}

bool method_allowed(const RouteMatch& match, std::string_view method) {
  return match.methods.empty() ||
         std::find(match.methods.begin(), match.methods.end(), method) != match.methods.end();
}

}  // namespace

std::string_view target_path(std::string_view target) {
  auto path = split_target(target).path;
  // absolute-form (RFC 9112 3.2.2): "http://host:port/path" -> "/path".
  if (!path.empty() && path.front() != '/') {
    const auto scheme_end = path.find("://");
    if (scheme_end != std::string_view::npos && scheme_end > 0) {
      const auto slash = path.find('/', scheme_end + 3);
      return slash == std::string_view::npos ? std::string_view("/") : path.substr(slash);
    }
  }
  return path;
}

RouteDecision select_route(const Config& config, std::string_view method, std::string_view target,
                           std::string_view host) {
  const auto path = target_path(target);
  RouteDecision decision;
  std::vector<std::string_view> allowed;  // union of methods of routes that matched but the method
  bool path_and_host_matched = false;
  for (const auto& route : config.routes) {
    if (!path_matches(route.match, path) || !host_matches(route.match, host)) continue;
    if (method_allowed(route.match, method)) {
      decision.kind = RouteDecision::Kind::kMatched;
      decision.route = &route;
      return decision;
    }
    path_and_host_matched = true;
    for (const auto& m : route.match.methods) {
      if (std::find(allowed.begin(), allowed.end(), m) == allowed.end()) allowed.push_back(m);
    }
  }
  if (!path_and_host_matched) return decision;  // kNotFound
  decision.kind = RouteDecision::Kind::kMethodNotAllowed;
  for (const auto m : allowed) {
    if (!decision.allow.empty()) decision.allow += ", ";
    decision.allow += m;
  }
  return decision;
}

std::string upstream_target(const RouteConfig& route, std::string_view target) {
  auto rewritten = rewritten_target(route, target);
  return rewritten ? std::move(*rewritten) : std::string(target);
}

std::optional<std::string> rewritten_target(const RouteConfig& route, std::string_view target) {
  if (!route.strip_prefix || route.match.path_kind != RouteMatch::PathKind::kPrefix) {
    return std::nullopt;
  }
  const auto path = target_path(target);
  const auto prefix_end = forwarded_prefix_length(path, route.match.path);
  if (!prefix_end) return std::nullopt;
  const auto query = target.substr(split_target(target).path.size());  // "?query" or ""

  std::string out;
  auto rest = path.substr(*prefix_end);
  // "/api" stripped from "/apiv2/x" leaves "v2/x": keep the result a valid origin-form path.
  if (rest.empty() || rest.front() != '/') out += '/';
  out += rest;
  out += query;
  return out;
}

}  // namespace sluice
