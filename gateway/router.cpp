#include "gateway/router.hpp"

#include <algorithm>
#include <utility>

#include <re2/re2.h>

#include "common/ascii.hpp"
#include "common/cookies.hpp"
#include "common/query_params.hpp"
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
      return match.regex &&
             RE2::FullMatch(re2::StringPiece(path.data(), path.size()), *match.regex);
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

// The test alone, on a value that is there.
bool value_passes(const ValueMatch& m, std::string_view value) {
  switch (m.kind) {
    case ValueMatch::Kind::kExact:
      return value == m.value;
    case ValueMatch::Kind::kPrefix:
      return value.starts_with(m.value);
    case ValueMatch::Kind::kRegex:
      return m.regex && RE2::FullMatch(re2::StringPiece(value.data(), value.size()), *m.regex);
    case ValueMatch::Kind::kPresent:
      return true;
    case ValueMatch::Kind::kAbsent:
      return false;
  }
  return false;
}

// A matcher on a value that may be missing (nullopt): absent passes only
// kAbsent; then invert.
bool passes(const ValueMatch& m, const std::optional<std::string_view>& value) {
  const bool result = value ? value_passes(m, *value) : m.kind == ValueMatch::Kind::kAbsent;
  return result != m.invert;
}

bool header_passes(const ValueMatch& m, const MatchInput* input) {
  std::size_t lines = 0;
  std::string_view first;
  std::string joined;  // two or more lines: their values joined with ","
  if (input) {
    input->each_header(m.name, [&](std::string_view value) {
      if (lines == 1) joined.assign(first);
      if (lines++ == 0) {
        first = value;
      } else {
        joined += ',';
        joined += value;
      }
    });
  }
  if (lines == 0) return passes(m, std::nullopt);
  return passes(m, lines == 1 ? first : std::string_view(joined));
}

bool query_passes(const ValueMatch& m, const MatchInput* input) {
  const std::string_view query = input ? input->query() : std::string_view();
  if (query_param_count(query, m.name) == 0) return passes(m, std::nullopt);
  const auto value = query_param(query, m.name);
  return passes(m, std::string_view(*value));
}

bool cookie_passes(const ValueMatch& m, const MatchInput* input) {
  // HTTP/2 may send the cookies in several lines.
  std::optional<std::string_view> found;
  if (input) {
    input->each_header("cookie", [&](std::string_view line) {
      if (!found) found = cookie_value(line, m.name);
    });
  }
  return passes(m, found);
}

}  // namespace

bool request_matches(const RequestMatchers& matchers, const MatchInput* input) {
  for (const auto& m : matchers.headers) {
    if (!header_passes(m, input)) return false;
  }
  for (const auto& m : matchers.query) {
    if (!query_passes(m, input)) return false;
  }
  for (const auto& m : matchers.cookies) {
    if (!cookie_passes(m, input)) return false;
  }
  return true;
}

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
                           std::string_view host, const MatchInput* input) {
  const auto path = target_path(target);
  RouteDecision decision;
  std::vector<std::string_view> allowed;  // union of methods of routes that matched but the method
  bool path_and_host_matched = false;
  for (const auto& route : config.routes) {
    if (!path_matches(route.match, path) || !host_matches(route.match, host)) continue;
    // A route whose request matchers fail is not there for this request,
    // neither to serve it nor to answer 405.
    if (!route.match.request.empty() && !request_matches(route.match.request, input)) continue;
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
