// Where a route's requests go: its request matchers (routes[].match.headers,
// .query, .cookies), its weighted split (routes[].upstreams, split_on), and
// the request keys that hash_on and split_on read.
#include <re2/re2.h>

#include <algorithm>

#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {
namespace {

constexpr std::string_view kTests = "exact, prefix, regex, present or absent";
constexpr std::int64_t kMaxSplitWeight = 1'000'000;

// One matcher: a name and exactly one test.
void read_value_match(YamlReader& r, const Field& f, const MappingKeys& keys, bool header,
                      std::vector<ValueMatch>& out) {
  const auto m = r.mapping(f, keys.keys);
  if (!m) return;
  ValueMatch match;
  bool valid = true;
  if (const Field* v = r.required(*m, "name")) {
    const auto name = r.nonempty_string(*v);
    if (name && header && !is_token(*name)) {
      r.error(*v, "invalid header name " + shown(*name));
      valid = false;
    } else if (name) {
      match.name = *name;
    } else {
      valid = false;
    }
  } else {
    valid = false;
  }
  const Field* test = nullptr;
  std::string test_key;
  for (const auto& e : m->entries) {
    if (e.key != "exact" && e.key != "prefix" && e.key != "regex" && e.key != "present" &&
        e.key != "absent") {
      continue;
    }
    if (test) {
      r.error(e.value, "only one of " + std::string(kTests) + " is allowed");
      valid = false;
      continue;
    }
    test = &e.value;
    test_key = e.key;
  }
  if (!test) {
    r.error(f, "missing one of " + std::string(kTests));
    return;
  }
  if (test_key == "present" || test_key == "absent") {
    const auto b = r.boolean(*test);
    if (b && !*b) {
      r.error(*test, "must be true (write " +
                         std::string(test_key == "present" ? "absent" : "present") +
                         ": true for the opposite)");
    }
    valid = valid && b && *b;
    match.kind = test_key == "present" ? ValueMatch::Kind::kPresent : ValueMatch::Kind::kAbsent;
  } else {
    const auto value = r.string(*test);
    if (!value) return;
    match.value = *value;
    if (test_key == "exact") {
      match.kind = ValueMatch::Kind::kExact;
    } else if (test_key == "prefix") {
      match.kind = ValueMatch::Kind::kPrefix;
    } else {
      match.kind = ValueMatch::Kind::kRegex;
      RE2::Options options;
      options.set_log_errors(false);
      auto regex = std::make_shared<const RE2>(*value, options);
      if (!regex->ok()) {
        r.error(*test, "invalid regular expression: " + regex->error() + " in " + shown(*value));
        valid = false;
      }
      match.regex = std::move(regex);
    }
  }
  if (const Field* v = m->get("invert")) {
    const auto b = r.boolean(*v);
    if (b) match.invert = *b;
    valid = valid && b;
  }
  if (valid) out.push_back(std::move(match));
}

void read_value_matches(YamlReader& r, const Field& f, const MappingKeys& keys, bool header,
                        std::vector<ValueMatch>& out) {
  const auto items = r.list(f);
  if (!items) return;
  for (const auto& item : *items) read_value_match(r, item, keys, header, out);
}

}  // namespace

void read_request_matchers(YamlReader& r, const Mapping& m, RequestMatchers& out) {
  if (const Field* v = m.get("headers")) read_value_matches(r, *v, kHeaderMatchKeys, true, out.headers);
  if (const Field* v = m.get("query")) read_value_matches(r, *v, kQueryMatchKeys, false, out.query);
  if (const Field* v = m.get("cookies")) {
    read_value_matches(r, *v, kCookieMatchKeys, false, out.cookies);
  }
}

void read_route_timeouts(YamlReader& r, const Mapping& m, RouteConfig& route) {
  if (const Field* v = m.get("timeout_ms")) {
    if (auto d = read_duration(r, *v)) route.timeouts.total = *d;
  }
  if (const Field* v = m.get("idle_timeout_ms")) {
    if (auto d = read_duration(r, *v)) route.timeouts.idle = *d;
  }
}

std::optional<HashOn> read_request_key(YamlReader& r, const Field& v, bool allow_path) {
  const auto s = r.nonempty_string(v);
  if (!s) return std::nullopt;
  HashOn on;
  const auto colon = s->find(':');
  const std::string kind = s->substr(0, colon);
  const std::string name = colon == std::string::npos ? "" : s->substr(colon + 1);
  if (kind == "ip" && colon == std::string::npos) {
    on.source = HashOn::Source::kIp;
  } else if (allow_path && kind == "path" && colon == std::string::npos) {
    on.source = HashOn::Source::kPath;
  } else if ((kind == "header" || kind == "cookie") && !name.empty()) {
    on.source = kind == "header" ? HashOn::Source::kHeader : HashOn::Source::kCookie;
    if (kind == "header" && !is_token(name)) {
      r.error(v, "invalid header name " + shown(name));
      return std::nullopt;
    }
    on.name = name;
  } else {
    r.error(v, std::string("must be header:NAME, cookie:NAME") + (allow_path ? ", ip or path" : " or ip") +
                   ", got " + shown(*s));
    return std::nullopt;
  }
  return on;
}

void read_route_split(YamlReader& r, const Mapping& m, RouteConfig& route,
                      ReadNotes::Route& notes) {
  const Field* upstreams = m.get("upstreams");
  const Field* split_on = m.get("split_on");
  if (!upstreams) {
    if (split_on) r.error(*split_on, "is read only with upstreams");
    return;
  }
  if (m.get("upstream")) r.error(*upstreams, "a route has upstream or upstreams, not both");
  const auto items = r.list(*upstreams);
  if (!items) return;
  if (items->empty()) r.error(*upstreams, "must list at least one upstream");
  for (const auto& item : *items) {
    const auto side = r.mapping(item, kRouteUpstreamKeys.keys);
    if (!side) continue;
    WeightedUpstream u;
    const Field* name = r.required(*side, "name");
    const auto text = name ? r.string(*name) : std::nullopt;
    if (const Field* v = side->get("weight")) {
      // 0: the upstream takes nothing yet (a canary about to start).
      if (auto n = r.integer(*v, 0, kMaxSplitWeight)) u.weight = static_cast<unsigned>(*n);
    }
    if (!text) continue;
    if (std::any_of(route.split.upstreams.begin(), route.split.upstreams.end(),
                    [&](const WeightedUpstream& w) { return w.name == *text; })) {
      r.error(*name, "upstream " + shown(*text) + " is listed twice");
      continue;
    }
    u.name = *text;
    notes.split_names.push_back({*name, r.here(), *text});
    route.split.total_weight += u.weight;
    route.split.upstreams.push_back(std::move(u));
  }
  if (!route.split.upstreams.empty() && route.split.total_weight == 0) {
    r.error(*upstreams, "the weights add up to 0: no upstream would take a request");
  }
  if (split_on) route.split.split_on = read_request_key(r, *split_on, false);
}

}  // namespace sluice::config
