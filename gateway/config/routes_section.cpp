// routes: what each route matches (path, methods, host; request matchers in
// traffic_section.cpp), the upstream it sends to (or its split), its limits
// and their cost, and what it does when Redis fails.
// The names of upstreams and limits are resolved by the second pass.
#include <algorithm>
#include <unordered_map>

#include "common/ascii.hpp"
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"
#include "gateway/request_target.hpp"

namespace sluice::config {
namespace {

constexpr std::string_view kPathKeys = "path_prefix, path_exact or path_regex";

void read_path(YamlReader& r, const Field& path, std::string_view key, RouteMatch& match) {
  const auto s = r.string(path);
  if (!s) return;
  match.path = *s;
  if (key == "path_regex") {
    match.path_kind = RouteMatch::PathKind::kRegex;
    // RE2: linear in the path's length whatever the expression (request
    // paths reach it unchecked, up to max_header_bytes).
    match.regex = compile_regex(r, path, *s);
    return;
  }
  match.path_kind =
      key == "path_prefix" ? RouteMatch::PathKind::kPrefix : RouteMatch::PathKind::kExact;
  if (!s->starts_with('/')) {
    r.error(path, "must start with \"/\", got " + shown(*s));
  } else if (s->find('?') != std::string::npos) {
    r.error(path, "must be a path without a query, got " + shown(*s));
  } else {
    // Requests are routed on their normalized path, so a path written
    // otherwise would never match.
    NormalizedTarget normalized;
    if (const auto why = normalize_target(*s, normalized); !why.empty()) {
      r.error(path, "invalid path " + shown(*s) + ": " + std::string(why));
    } else if (normalized.route_path != *s) {
      r.error(path, "requests are matched on their normalized path: write " +
                        shown(normalized.route_path) + " instead of " + shown(*s));
    }
  }
}

void read_methods(YamlReader& r, const Field& v, RouteMatch& match) {
  const auto items = r.list(v);
  if (!items) return;
  if (items->empty()) {
    r.error(v, "must list at least one method (omit the key to allow any method)");
  }
  for (const auto& item : *items) {
    auto s = r.string(item);
    if (!s) continue;
    if (!is_token(*s)) {
      r.error(item, "invalid method " + shown(*s));
      continue;
    }
    ascii::to_upper_in_place(*s);
    if (std::find(match.methods.begin(), match.methods.end(), *s) == match.methods.end()) {
      match.methods.push_back(*s);
    }
  }
}

void read_host(YamlReader& r, const Field& v, RouteMatch& match) {
  const auto s = r.nonempty_string(v);
  if (!s) return;
  std::string host = *s;
  ascii::to_lower_in_place(host);
  if (host.size() > 1 && host.back() == '.') host.pop_back();
  const bool bracketed =
      host.front() == '[' && host.back() == ']' &&
      parse_ip_literal(std::string_view(host).substr(1, host.size() - 2), IpFamily::kV6);
  if (!bracketed && host.find(':') != std::string::npos) {
    r.error(v, "must be a host name without a port, got " + shown(*s));
  } else if (!bracketed && !is_host_name(host)) {
    r.error(v, "invalid host " + shown(*s));
  } else {
    match.host = host;
  }
}

// Returns the path key used (nullopt when there is none); `methods_field` is
// set to match.methods when the route lists methods.
std::optional<std::string> read_match(YamlReader& r, const Field& f, RouteMatch& match,
                                      Field& methods_field) {
  const auto m = r.mapping(f, kMatchKeys.keys);
  if (!m) return std::nullopt;
  // Exactly one of the path keys, in file order.
  const Field* path = nullptr;
  std::optional<std::string> path_key;
  for (const auto& e : m->entries) {
    if (e.key != "path_prefix" && e.key != "path_exact" && e.key != "path_regex") continue;
    if (path) {
      r.error(e.value.line, f.path, "only one of " + std::string(kPathKeys) + " is allowed");
      continue;
    }
    path = &e.value;
    path_key = e.key;
  }
  if (!path) {
    r.error(f, "missing one of " + std::string(kPathKeys));
  } else {
    read_path(r, *path, *path_key, match);
  }
  if (auto* v = m->get("methods")) {
    methods_field = *v;
    read_methods(r, *v, match);
  }
  if (auto* v = m->get("host")) read_host(r, *v, match);
  read_request_matchers(r, *m, match.request);
  return path_key;
}

// on_limit: reject (the default) or delay, which needs a max_delay_ms above 0;
// max_delay_ms alone is accepted (0 to 24.8 days) and used only by delay.
void read_on_limit(YamlReader& r, const Mapping& m, RouteConfig& route) {
  bool max_delay_bad = false;  // already reported: no second error for the same mistake
  if (auto* v = m.get("max_delay_ms")) {
    const auto ms = r.integer(*v, 0, kMaxDurationMs);
    if (ms) route.max_delay = Millis(*ms);
    max_delay_bad = !ms;
  }
  const Field* v = m.get("on_limit");
  if (!v) return;
  const auto s = r.string(*v);
  if (!s) return;
  if (*s == "reject") {
    route.on_limit = RouteConfig::OnLimit::kReject;
  } else if (*s == "delay") {
    route.on_limit = RouteConfig::OnLimit::kDelay;
    if (route.max_delay.count() <= 0 && !max_delay_bad) {
      r.error(*v, "delay needs max_delay_ms greater than 0");
    }
  } else {
    r.error(*v, "expected reject or delay, got " + shown(*s));
  }
}

void read_route(YamlReader& r, const Field& f, RouteConfig& route, ReadNotes::Route& notes,
                std::unordered_map<std::string, int>& first_line, bool have_providers) {
  const auto m = r.mapping(f, kRouteKeys.keys);
  if (!m) return;
  if (auto* v = r.required(*m, "name")) {
    if (auto s = r.string(*v); s && check_name(r, *v, *s)) {
      const auto [it, inserted] = first_line.emplace(*s, v->line);
      if (!inserted) {
        r.error(*v, "duplicate route name " + shown(*s) + " (first at line " +
                        std::to_string(it->second) + ")");
      }
      route.name = *s;
    }
  }
  std::optional<std::string> path_key;
  if (auto* v = r.required(*m, "match")) {
    path_key = read_match(r, *v, route.match, notes.methods_or_route);
  }
  if (!m->get("upstreams")) {
    if (auto* v = r.required(*m, "upstream")) {
      if (auto s = r.string(*v)) {
        route.upstream = *s;
        notes.upstream = ReadValue{*v, r.here(), *s};
      }
    }
  }
  read_route_split(r, *m, route, notes);
  read_route_timeouts(r, *m, route);
  read_route_retry(r, *m, route);
  read_route_mirror(r, *m, route, notes);
  if (auto* v = m->get("strip_prefix")) {
    if (auto b = r.boolean(*v)) {
      route.strip_prefix = *b;
      if (*b && path_key && *path_key != "path_prefix") {
        r.error(*v, "only valid with match.path_prefix");
      }
    }
  }
  if (auto* v = m->get("ignore_client_abort")) {
    if (auto b = r.boolean(*v)) route.ignore_client_abort = *b;
  }
  const Field* cost = m->get("cost");
  bool cost_valid = false;
  std::optional<Field> body_cost_default;
  if (cost && cost->node.IsMap()) {
    // The estimate from the request body; its default is the route's cost.
    body_cost_default = read_body_cost(r, *cost, route);
    cost = body_cost_default ? &*body_cost_default : nullptr;
    cost_valid = cost != nullptr;
  } else if (cost) {
    const auto n = r.positive_number(*cost);
    if (n) route.cost = *n;
    cost_valid = n.has_value();
  }
  if (auto* v = m->get("max_inspect_bytes")) {
    if (auto n = r.integer(*v, 1024, std::int64_t{64} << 20)) {
      route.body.max_inspect_bytes = static_cast<std::size_t>(*n);
      notes.max_inspect_bytes = *v;
    }
  }
  if (auto* v = m->get("limits")) {
    notes.limits = *v;
    if (auto items = r.list(*v)) {
      for (const auto& item : *items) {
        if (auto name = r.string(item)) notes.limit_names.push_back({item, r.here(), *name});
      }
    }
  }
  if (auto* v = m->get("on_redis_failure")) {
    if (auto s = r.string(*v)) {
      if (*s == "open") {
        route.on_redis_failure = FailureMode::kOpen;
      } else if (*s == "closed") {
        route.on_redis_failure = FailureMode::kClosed;
      } else if (*s == "local") {
        route.on_redis_failure = FailureMode::kLocal;
      } else {
        r.error(*v, "expected open, closed or local, got " + shown(*s));
      }
    }
  }
  read_on_limit(r, *m, route);
  read_route_cost_and_reject(r, *m, route, notes);
  read_route_headers(r, *m, route);
  if (auto* v = m->get("ip_access")) read_ip_access(r, *v, route.ip_access);
  if (auto* v = m->get("cors")) read_cors(r, *v, route);
  if (auto* v = m->get("client_headers")) route.client_headers = read_client_headers(r, *v);
  if (auto* v = m->get("auth")) {
    if (const auto auth = read_route_auth(r, *v)) {
      route.auth = *auth;
      if (*auth != RouteAuth::kNone && !have_providers) {
        r.error(*v, "needs auth.jwt.providers: no token could be verified");
      }
    }
  }
  if (cost_valid) notes.cost = ReadValue{*cost, r.here(), {}};
}

}  // namespace

void read_routes(YamlReader& r, const Field& f, Config& c, ReadNotes& notes) {
  const auto items = r.list(f);
  if (!items) return;
  std::unordered_map<std::string, int> first_line;
  for (const auto& item : *items) {
    RouteConfig route;
    ReadNotes::Route route_notes;
    route_notes.methods_or_route = item;  // replaced by match.methods when the route has them
    read_route(r, item, route, route_notes, first_line, !c.auth.jwt.empty());
    notes.routes.push_back(std::move(route_notes));
    c.routes.push_back(std::move(route));
  }
}

}  // namespace sluice::config
