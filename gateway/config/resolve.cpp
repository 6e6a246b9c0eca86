#include "gateway/config/resolve.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "gateway/config/checks.hpp"
#include "gateway/config/text.hpp"

namespace sluice::config {
namespace {

void check_admin_listen(YamlReader& r, const ReadNotes& notes, const Config& c) {
  if (!notes.server_listen_valid) return;
  const auto& server = c.server.listen;
  if (notes.admin_listen && listeners_overlap(c.admin.listen, server)) {
    r.error_at(notes.admin_listen->mark, notes.admin_listen->field,
               "conflicts with server.listen " + shown(server.to_string()));
  }
  if (!notes.tls_listen || !c.server.tls) return;
  const auto& tls = *c.server.tls->listen;
  if (listeners_overlap(tls, server)) {
    r.error(*notes.tls_listen, "conflicts with server.listen " + shown(server.to_string()));
  } else if (notes.admin_listen && listeners_overlap(tls, c.admin.listen)) {
    r.error(*notes.tls_listen, "conflicts with admin.listen " + shown(c.admin.listen.to_string()));
  }
}

// The plans a key can have: the default plan and the consumers', and the
// list of them for messages.
std::pair<std::set<std::string>, std::string> known_plans(const ReadNotes& notes, const Config& c) {
  std::set<std::string> known = notes.consumer_plans;
  known.insert(c.api_keys.default_plan);
  std::string list;
  for (const auto& name : known) list += (list.empty() ? "" : ", ") + name;
  return {std::move(known), std::move(list)};
}

std::string unknown_plan(const std::string& plan, const std::string& list) {
  return "unknown plan " + shown(plan) +
         ": not api_keys.default_plan nor the plan of a consumer (known: " + list + ")";
}

// With a plans list, every plan named anywhere must be listed: the default
// plan, the YAML consumers', the limits' overrides and the exempt plans.
void check_declared_plans(YamlReader& r, const ReadNotes& notes, const Config& c) {
  const std::set<std::string> declared(c.plans.begin(), c.plans.end());
  std::string list;
  for (const auto& name : c.plans) list += (list.empty() ? "" : ", ") + name;
  const auto check = [&](const std::string& plan, YamlReader::Mark mark, const Field& field) {
    if (plan.empty() || declared.count(plan)) return;
    r.error_at(mark, field, "unknown plan " + shown(plan) + ": not in plans (" + list + ")");
  };
  if (notes.api_keys_read) {
    if (notes.default_plan) {
      check(c.api_keys.default_plan, notes.plans_mark, *notes.default_plan);
    } else if (!declared.count(c.api_keys.default_plan)) {
      r.error_at(notes.plans_mark, *notes.plans,
                 "does not list " + shown(c.api_keys.default_plan) +
                     ", the default api_keys.default_plan");
    }
    for (const auto& plan : notes.consumer_plan_values) check(plan.text, plan.mark, plan.field);
  }
  for (const auto& [plan, field] : notes.plan_overrides) check(plan, notes.plans_mark, field);
  for (const auto& plan : notes.exempt_plans) check(plan.text, plan.mark, plan.field);
}

// The consumer store needs the plans its consumers may be on, and the secret
// their keys are fingerprinted under (never stored raw).
void check_store(YamlReader& r, const ReadNotes& notes, const Config& c) {
  if (!notes.store) return;
  if (c.plans.empty()) {
    r.error_at(notes.plans_mark, *notes.store,
               "redis needs the top-level plans list (the plans consumers may be on)");
  }
  if (c.redis.key_secret.empty()) {
    r.error_at(notes.plans_mark, *notes.store,
               "redis needs redis.key_secret_file: consumer keys are kept in Redis only as "
               "HMAC fingerprints under that secret");
  }
}

// A plan override applies only to a plan some key can have: the default plan
// or a consumer's. Any other name is a typo that would silently give those
// customers the base limits.
void check_plan_names(YamlReader& r, const ReadNotes& notes, const Config& c) {
  if (notes.plans) return check_declared_plans(r, notes, c);
  if (!notes.api_keys_read || notes.plan_overrides.empty()) return;
  const auto [known, list] = known_plans(notes, c);
  for (const auto& [plan, field] : notes.plan_overrides) {
    if (plan.empty() || known.count(plan)) continue;
    r.error_at(notes.plans_mark, field, unknown_plan(plan, list));
  }
}

// Only the keys of listed consumers can be exempt by plan: an unlisted key
// gets the default plan, so exempting a plan no consumer has would exempt
// nobody (a typo) or, for the default plan, any key a client makes up. With
// the consumer store, any declared plan may be a stored consumer's.
void check_exempt_plans(YamlReader& r, const ReadNotes& notes, const Config& c) {
  if (notes.store) return;
  std::string list;
  for (const auto& name : notes.consumer_plans) list += (list.empty() ? "" : ", ") + name;
  for (const auto& plan : notes.exempt_plans) {
    if (notes.consumer_plans.count(plan.text)) continue;
    // An undeclared plan is reported as such (check_declared_plans).
    if (notes.plans && !is_known_plan(c, plan.text)) continue;
    r.error_at(plan.mark, plan.field,
               "no consumer in api_keys.consumers has plan " + shown(plan.text) +
                   " (only listed keys can be exempt; consumers' plans: " +
                   (list.empty() ? "none" : list) + ")");
  }
}

void resolve_upstream(YamlReader& r, const ReadNotes& notes, const ReadValue& name, const Config& c,
                      RouteConfig& route) {
  const auto& ups = c.upstreams;
  const auto it = std::find_if(ups.begin(), ups.end(),
                               [&](const UpstreamConfig& u) { return u.name == name.text; });
  if (it != ups.end()) {
    route.upstream_index = static_cast<std::size_t>(it - ups.begin());
  } else if (notes.upstreams_read) {
    r.error_at(name.mark, name.field, "unknown upstream " + shown(name.text));
  }
}

// A split's upstreams by index; the route's own upstream_index is the first
// that takes traffic (what reads a route's one upstream, such as the lease
// check, reads that one).
void resolve_split(YamlReader& r, const ReadNotes& notes, const ReadNotes::Route& route_notes,
                   const Config& c, RouteConfig& route) {
  const auto& ups = c.upstreams;
  bool chosen = false;
  for (std::size_t i = 0; i < route_notes.split_names.size() && i < route.split.upstreams.size();
       ++i) {
    const ReadValue& name = route_notes.split_names[i];
    WeightedUpstream& side = route.split.upstreams[i];
    const auto it = std::find_if(ups.begin(), ups.end(),
                                 [&](const UpstreamConfig& u) { return u.name == name.text; });
    if (it == ups.end()) {
      if (notes.upstreams_read) {
        r.error_at(name.mark, name.field, "unknown upstream " + shown(name.text));
      }
      continue;
    }
    side.index = static_cast<std::size_t>(it - ups.begin());
    if (!chosen && side.weight > 0) {
      route.upstream_index = side.index;
      route.upstream = side.name;
      chosen = true;
    }
  }
}

void resolve_mirror(YamlReader& r, const ReadNotes& notes, const ReadNotes::Route& route_notes,
                    const Config& c, RouteConfig& route) {
  if (!route.mirror || !route_notes.mirror_upstream) return;
  const ReadValue& name = *route_notes.mirror_upstream;
  const auto it = std::find_if(c.upstreams.begin(), c.upstreams.end(),
                               [&](const UpstreamConfig& u) { return u.name == name.text; });
  if (it == c.upstreams.end()) {
    if (notes.upstreams_read) r.error_at(name.mark, name.field, "unknown upstream " + shown(name.text));
    return;
  }
  route.mirror->upstream_index = static_cast<std::size_t>(it - c.upstreams.begin());
}

void resolve_limits(YamlReader& r, const ReadNotes& notes, const ReadNotes::Route& route_notes,
                    const Config& c, RouteConfig& route) {
  for (const auto& name : route_notes.limit_names) {
    if (std::find(route.limits.begin(), route.limits.end(), name.text) != route.limits.end()) {
      r.error_at(name.mark, name.field, "limit " + shown(name.text) + " is listed twice");
      continue;
    }
    const auto it = std::find_if(c.limits.begin(), c.limits.end(),
                                 [&](const LimitConfig& l) { return l.name == name.text; });
    if (it == c.limits.end()) {
      if (notes.limits_read) {
        r.error_at(name.mark, name.field, "unknown limit " + shown(name.text));
      }
      continue;
    }
    route.limits.push_back(name.text);
    route.limit_indexes.push_back(static_cast<std::size_t>(it - c.limits.begin()));
  }
}

// A request that costs more than a bucket holds would be denied forever:
// the route's cost, and the largest cost its cost header may ask for.
void check_cost(YamlReader& r, const ReadNotes& notes, const ReadValue& cost, double value,
                std::string_view what, const Config& c, const RouteConfig& route) {
  const auto over = [&](const BucketParams& params) {
    return std::string(what) + " " + format_number(value) + " is more than the capacity " +
           format_number(params.capacity);
  };
  for (std::size_t i : route.limit_indexes) {
    if (!notes.limit_valid[i]) continue;
    const auto& l = c.limits[i];
    // A request takes one slot of a concurrency limit, whatever its cost.
    if (l.algorithm == LimitAlgorithm::kConcurrency) continue;
    if (value > l.bucket.capacity) {
      r.error_at(cost.mark, cost.field, over(l.bucket) + " of limit " + shown(l.name));
    }
    for (const auto& [plan, params] : l.plans) {
      if (value > params.capacity) {
        r.error_at(cost.mark, cost.field,
                   over(params) + " of limit " + shown(l.name) + " plan " + shown(plan));
      }
    }
    for (const auto& model : l.models) {
      if (value > model.bucket.capacity) {
        r.error_at(cost.mark, cost.field,
                   over(model.bucket) + " of limit " + shown(l.name) + " model " +
                       shown(model.pattern));
      }
      for (const auto& [plan, params] : model.plans) {
        if (value > params.capacity) {
          r.error_at(cost.mark, cost.field,
                     over(params) + " of limit " + shown(l.name) + " model " +
                         shown(model.pattern) + " plan " + shown(plan));
        }
      }
    }
  }
}

// A concurrency limit counts requests in progress: a route cannot wait for
// one of its slots (on_limit: delay).
void check_concurrency_delay(YamlReader& r, const ReadNotes::Route& route_notes, const Config& c,
                             const RouteConfig& route) {
  if (route.on_limit != RouteConfig::OnLimit::kDelay || !route_notes.limits) return;
  for (std::size_t i : route.limit_indexes) {
    if (c.limits[i].algorithm != LimitAlgorithm::kConcurrency) continue;
    r.error(*route_notes.limits, "on_limit: delay cannot wait for concurrency limit " +
                                     shown(c.limits[i].name) +
                                     " (its slots come back when exchanges end)");
  }
}

// A live instance renews its slots every third of lease_ms; a lease shorter
// than what a request may take upstream loses the slot of a slow request when
// renewals fail (Redis unreachable for longer than the lease).
void warn_short_leases(YamlReader& r, const ReadNotes::Route& route_notes, const Config& c,
                       const RouteConfig& route) {
  if (!route_notes.limits || route.upstream_index >= c.upstreams.size()) return;
  const UpstreamConfig& upstream = c.upstreams[route.upstream_index];
  const auto longest = upstream.connect_timeout + upstream.response_timeout;
  for (std::size_t i : route.limit_indexes) {
    const LimitConfig& l = c.limits[i];
    if (l.algorithm != LimitAlgorithm::kConcurrency || l.lease >= longest) continue;
    r.warning(*route_notes.limits,
              "lease_ms " + std::to_string(l.lease.count()) + " of concurrency limit " +
                  shown(l.name) + " is shorter than upstream " + shown(upstream.name) +
                  "'s connect and response timeouts (" + std::to_string(longest.count()) +
                  " ms): a slow request could lose its slot while Redis is unreachable");
  }
}

// A header named with "_" never reaches the limiter unless
// server.headers_with_underscores is allow.
void warn_if_underscores_hide(YamlReader& r, const HeaderUse& use, const Config& c) {
  using Underscores = ServerConfig::Underscores;
  const auto policy = c.server.headers_with_underscores;
  if (use.name.find('_') == std::string::npos || policy == Underscores::kAllow) return;
  r.warning(use.field, "header " + shown(use.name) +
                           " has \"_\" in its name, and "
                           "server.headers_with_underscores is " +
                           (policy == Underscores::kDrop ? "drop: the header is removed before "
                                                           "the limiter sees it"
                                                         : "reject: requests with it get 400") +
                           "; rename it or set headers_with_underscores: allow");
}

// With no consumers listed (nor a consumer store) every API key is its own bucket, so a route whose
// every limit is keyed by the API key never denies a client that sends a new
// random key each time. A limit without api_key in its key (ip, global...) bounds it.
void warn_if_keys_mint_buckets(YamlReader& r, const Field& f, const RouteConfig& route,
                               const Config& c) {
  // Consumers decide who is known: listed ones, or the store's.
  if (route.limit_indexes.empty() || !c.api_keys.consumers.empty() ||
      c.api_keys.store == ApiKeysConfig::Store::kRedis) {
    return;
  }
  for (std::size_t i : route.limit_indexes) {
    const auto& key = c.limits[i].key;
    const bool keyed_by_api_key = std::any_of(key.begin(), key.end(), [](const KeySource& k) {
      return k.kind == KeySource::Kind::kApiKey;
    });
    if (!keyed_by_api_key) return;
  }
  r.warning(f,
            "every limit is keyed by api_key and api_keys.consumers is empty: each new key "
            "gets a fresh bucket, so random keys are never denied; add a limit keyed by ip "
            "beside them or list the consumers");
}

// Routes fall through on a method they do not list. When the route they fall
// to takes any method on the same paths and has no limits, listing methods
// turned the limits into a choice of the client.
// Every other key Sluice writes starts with redis.key_prefix; the stream is
// named by the operator, and a Redis user restricted to the prefix cannot
// append to a stream outside it.
void warn_stream_outside_prefix(YamlReader& r, const ReadNotes& notes, const Config& c) {
  const std::string& stream = c.audit.redis_stream;
  if (!notes.audit_stream || stream.starts_with(c.redis.key_prefix)) return;
  r.warning(*notes.audit_stream,
            "the stream " + shown(stream) + " is outside redis.key_prefix " +
                shown(c.redis.key_prefix) +
                ", where every other key of Sluice lies: a Redis user limited to the prefix "
                "cannot append to it; name it under the prefix (" +
                shown(c.redis.key_prefix + "denials") + ")");
}

void warn_method_bypasses(YamlReader& r, const ReadNotes& notes, const Config& c) {
  for (const auto& bypass : find_method_bypasses(c)) {
    const auto& later = c.routes[bypass.unlimited];
    const std::string later_path = index_path("routes", bypass.unlimited);
    r.warning(notes.routes[bypass.limited].methods_or_route,
              "requests with a method not listed here (TRACE, PURGE, a lower-case \"get\"...) "
              "fall through to " +
                  later_path + " (" + shown(later.name) +
                  "), which matches the same paths with no limits, so they bypass the "
                  "limits of this route; give " +
                  later_path + " limits, or drop methods here to limit every method");
  }
}

// The request body's members the route reads: its limits' body: key parts,
// then its cost's from_body paths, each once.
void resolve_body_fields(YamlReader& r, const ReadNotes::Route& notes, const Config& c,
                         RouteConfig& route) {
  const auto add = [&](const std::string& path) {
    if (std::find(route.body.fields.begin(), route.body.fields.end(), path) ==
        route.body.fields.end()) {
      route.body.fields.push_back(path);
    }
  };
  for (const std::size_t i : route.limit_indexes) {
    for (const KeySource& source : c.limits[i].key) {
      if (source.kind == KeySource::Kind::kBody) add(source.name);
    }
  }
  if (route.body.cost) {
    for (const auto& path : route.body.cost->paths) add(path);
  }
  if (notes.max_inspect_bytes && !route.reads_request_body()) {
    r.error(*notes.max_inspect_bytes,
            "only valid on a route that reads its request body (a limit keyed on body:PATH, or "
            "a cost with from_body or add_prompt_estimate)");
  }
}

}  // namespace

bool listeners_overlap(const HostPort& a, const HostPort& b) {
  const auto wildcard = [](const std::string& h) { return h == "0.0.0.0" || h == "::"; };
  return a.port != 0 && a.port == b.port &&
         (a.host == b.host || wildcard(a.host) || wildcard(b.host));
}

void resolve(YamlReader& r, const ReadNotes& notes, Config& c) {
  // In the order of the marks, so that errors at one mark keep the reading order.
  check_admin_listen(r, notes, c);
  check_plan_names(r, notes, c);
  check_exempt_plans(r, notes, c);
  check_store(r, notes, c);
  for (std::size_t i = 0; i < c.routes.size(); ++i) {
    const auto& route_notes = notes.routes[i];
    auto& route = c.routes[i];
    if (route_notes.upstream) resolve_upstream(r, notes, *route_notes.upstream, c, route);
    resolve_split(r, notes, route_notes, c, route);
    resolve_mirror(r, notes, route_notes, c, route);
    resolve_limits(r, notes, route_notes, c, route);
    if (route_notes.cost) check_cost(r, notes, *route_notes.cost, route.cost, "cost", c, route);
    if (route_notes.max_cost) {
      check_cost(r, notes, *route_notes.max_cost, route.max_cost, "max_cost", c, route);
    }
    check_concurrency_delay(r, route_notes, c, route);
    resolve_body_fields(r, route_notes, c, route);
  }
  // Warnings are given only with a valid configuration.
  if (r.has_errors()) return;
  for (const auto& use : notes.header_uses) warn_if_underscores_hide(r, use, c);
  for (const auto& route_notes : notes.routes) {
    if (route_notes.cost_header) warn_if_underscores_hide(r, *route_notes.cost_header, c);
  }
  for (std::size_t i = 0; i < c.routes.size(); ++i) {
    if (const auto& limits = notes.routes[i].limits) {
      warn_if_keys_mint_buckets(r, *limits, c.routes[i], c);
    }
    warn_short_leases(r, notes.routes[i], c, c.routes[i]);
  }
  warn_method_bypasses(r, notes, c);
  warn_stream_outside_prefix(r, notes, c);
}

}  // namespace sluice::config
