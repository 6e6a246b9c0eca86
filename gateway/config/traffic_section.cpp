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
      match.regex = compile_regex(r, *test, *value);
      valid = valid && match.regex;
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

std::shared_ptr<const RE2> compile_regex(YamlReader& r, const Field& f, const std::string& text) {
  RE2::Options options;
  options.set_log_errors(false);
  auto regex = std::make_shared<const RE2>(text, options);
  if (!regex->ok()) {
    r.error(f, "invalid regular expression: " + regex->error() + " in " + shown(text));
    return nullptr;
  }
  return regex;
}

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

namespace sluice::config {
namespace {

constexpr std::int64_t kMaxAttempts = 10;
constexpr std::int64_t kMaxReplayBytes = 16 * 1024 * 1024;

// routes[].retry.on: the failures retried.
void read_retry_on(YamlReader& r, const Field& f, RetryPolicy& policy) {
  const auto items = r.list(f);
  if (!items) return;
  if (items->empty()) r.error(f, "must list at least one failure to retry");
  for (const auto& item : *items) {
    // 502, 503 and 504 may be written as numbers.
    const auto s = r.scalar(item, "expected a failure name");
    if (!s) continue;
    if (*s == "connect_failure") {
      policy.allow(RetryCause::kConnectFailure);
    } else if (*s == "reset") {
      policy.allow(RetryCause::kReset);
    } else if (*s == "timeout") {
      policy.allow(RetryCause::kTimeout);
    } else if (*s == "502") {
      policy.allow(RetryCause::kStatus502);
    } else if (*s == "503") {
      policy.allow(RetryCause::kStatus503);
    } else if (*s == "504") {
      policy.allow(RetryCause::kStatus504);
    } else if (*s == "gateway_error") {
      policy.allow(RetryCause::kStatus502);
      policy.allow(RetryCause::kStatus503);
      policy.allow(RetryCause::kStatus504);
      policy.allow(RetryCause::kTimeout);
    } else if (*s == "unavailable") {
      policy.allow(RetryCause::kGrpcUnavailable);
    } else {
      r.error(item, "unknown failure " + shown(*s) +
                        " (connect_failure, reset, timeout, 502, 503, 504, gateway_error or "
                        "unavailable)");
    }
  }
}

// routes[].retry.backoff: a base alone caps at ten times it (as Envoy's), a
// cap alone below the default base lowers the base to it.
void read_retry_backoff(YamlReader& r, const Field& f, RetryPolicy& policy) {
  const auto b = r.mapping(f, kRetryBackoffKeys.keys);
  if (!b) return;
  std::optional<std::int64_t> base;
  std::optional<std::int64_t> max;
  bool valid = true;
  if (const Field* v = b->get("base_ms")) {
    base = r.integer(*v, 0, 60'000);
    valid = valid && base;
  }
  if (const Field* v = b->get("max_ms")) {
    max = r.integer(*v, 0, 60'000);
    valid = valid && max;
  }
  if (!valid) return;
  if (base && max && *max < *base) {
    r.error(f, "max_ms (" + std::to_string(*max) + ") must be at least base_ms (" +
                   std::to_string(*base) + ")");
    return;
  }
  const std::int64_t default_base = policy.backoff_base.count();
  const std::int64_t base_ms = base ? *base : std::min(default_base, max.value_or(default_base));
  const std::int64_t max_ms =
      max ? *max : base ? std::min<std::int64_t>(*base * 10, 60'000) : policy.backoff_max.count();
  policy.backoff_base = std::chrono::milliseconds(base_ms);
  policy.backoff_max = std::chrono::milliseconds(max_ms);
}

bool idempotent_method(std::string_view m) {
  return m == "GET" || m == "HEAD" || m == "OPTIONS" || m == "PUT" || m == "DELETE";
}

}  // namespace

void read_route_retry(YamlReader& r, const Mapping& route_keys, RouteConfig& route) {
  const Field* f = route_keys.get("retry");
  if (!f) return;
  const auto m = r.mapping(*f, kRetryKeys.keys);
  if (!m) return;
  RetryPolicy policy;
  if (const Field* v = m->get("attempts")) {
    if (auto n = r.integer(*v, 1, kMaxAttempts)) policy.attempts = static_cast<unsigned>(*n);
  }
  if (const Field* v = r.required(*m, "on")) read_retry_on(r, *v, policy);
  if (const Field* v = m->get("per_try_timeout_ms")) {
    if (auto d = read_duration(r, *v)) policy.per_try_timeout = *d;
  }
  if (const Field* v = m->get("backoff")) read_retry_backoff(r, *v, policy);
  if (const Field* v = m->get("retry_non_idempotent")) {
    if (auto b = r.boolean(*v)) policy.non_idempotent = *b;
  }
  if (const Field* v = m->get("max_replay_bytes")) {
    if (auto n = r.integer(*v, 0, kMaxReplayBytes)) policy.max_replay_bytes = static_cast<std::size_t>(*n);
  }
  const auto& methods = route.match.methods;
  if (!policy.non_idempotent && !methods.empty() &&
      std::none_of(methods.begin(), methods.end(), idempotent_method)) {
    r.error(*f, "the route takes only non-idempotent methods, which are retried only with "
                "retry_non_idempotent: true");
  }
  route.retry = policy;
}

}  // namespace sluice::config

namespace sluice::config {

void read_route_mirror(YamlReader& r, const Mapping& route_keys, RouteConfig& route,
                       ReadNotes::Route& notes) {
  const Field* f = route_keys.get("mirror");
  if (!f) return;
  const auto m = r.mapping(*f, kMirrorKeys.keys);
  if (!m) return;
  MirrorPolicy mirror;
  if (const Field* v = r.required(*m, "upstream")) {
    if (auto s = r.nonempty_string(*v)) {
      mirror.upstream = *s;
      notes.mirror_upstream = ReadValue{*v, r.here(), *s};
    }
  }
  if (const Field* v = m->get("percent")) {
    if (auto n = r.positive_number(*v)) {
      if (*n > 100) {
        r.error(*v, "must be at most 100, got " + format_number(*n));
      } else {
        mirror.percent = *n;
      }
    }
  }
  if (const Field* v = m->get("max_in_flight")) {
    if (auto n = r.integer(*v, 1, kMaxCount)) mirror.max_in_flight = static_cast<std::size_t>(*n);
  }
  if (const Field* v = m->get("max_body_bytes")) {
    if (auto n = r.integer(*v, 0, kMaxReplayBytes)) {
      mirror.max_body_bytes = static_cast<std::size_t>(*n);
    }
  }
  route.mirror = mirror;
}

}  // namespace sluice::config
