// limits: the named token buckets and sliding windows, what keys them, and
// per-plan overrides.
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {
namespace {

std::optional<KeySource> read_key_source(YamlReader& r, const Field& f, ReadNotes& notes) {
  const auto text = r.string(f);
  if (!text) return std::nullopt;
  using Kind = KeySource::Kind;
  static const std::pair<std::string_view, Kind> kPlain[] = {{"api_key", Kind::kApiKey},
                                                             {"ip", Kind::kIp},
                                                             {"path", Kind::kPath},
                                                             {"route", Kind::kRoute},
                                                             {"global", Kind::kGlobal}};
  for (const auto& [word, kind] : kPlain) {
    if (*text == word) return KeySource{kind, {}};
  }
  const std::string_view t = *text;
  if (t.starts_with("header:")) {
    const auto name = t.substr(7);
    if (!is_token(name)) {
      r.error(f, "invalid header name " + shown(name) + " in " + shown(t));
      return std::nullopt;
    }
    notes.header_uses.push_back({f, std::string(name)});
    return KeySource{Kind::kHeader, std::string(name)};
  }
  if (t.starts_with("query:")) {
    const auto name = t.substr(6);
    if (name.empty()) {
      r.error(f, "missing parameter name in " + shown(t));
      return std::nullopt;
    }
    return KeySource{Kind::kQuery, std::string(name)};
  }
  r.error(f, "unknown key source " + shown(t) +
                 " (expected api_key, ip, path, route, global, header:NAME or query:NAME)");
  return std::nullopt;
}

// "ip", "header:X-Tenant", or a non-empty list of those.
bool read_key_sources(YamlReader& r, const Field& f, std::vector<KeySource>& out,
                      ReadNotes& notes) {
  if (f.node.IsScalar()) {
    auto s = read_key_source(r, f, notes);
    if (s) out.push_back(*s);
    return s.has_value();
  }
  if (!f.node.IsSequence()) {
    r.error(f, "expected a key source or a list of them" + YamlReader::got_kind(f));
    return false;
  }
  const auto items = r.list(f);
  if (items->empty()) {
    r.error(f, "must list at least one key source");
    return false;
  }
  bool ok = true;
  for (const auto& item : *items) {
    auto s = read_key_source(r, item, notes);
    if (s) out.push_back(*s);
    ok = s && ok;
  }
  return ok;
}

// Sets `target` from an optional key; false when the key is given but invalid.
bool read_bucket_number(YamlReader& r, const Field* v, double& target) {
  if (!v) return true;
  const auto n = r.positive_number(*v);
  if (n) target = *n;
  return n.has_value();
}

// window_ms: a sliding window's length, kept in seconds.
bool read_window(YamlReader& r, const Field* v, double& window_seconds) {
  if (!v) return true;
  const auto ms = read_duration(r, *v);
  if (ms) window_seconds = static_cast<double>(ms->count()) / 1000.0;
  return ms.has_value();
}

// The key that the limit's algorithm does not use, if given, is an error.
bool refuse_other_algorithm(YamlReader& r, const Mapping& m, LimitConfig::Algorithm algorithm) {
  const bool window = algorithm == LimitConfig::Algorithm::kSlidingWindow;
  if (const Field* v = m.get(window ? "refill_per_second" : "window_ms")) {
    r.error(*v, window
                    ? "is not used by algorithm sliding_window (it admits capacity per window_ms)"
                    : "needs algorithm: sliding_window");
    return false;
  }
  return true;
}

// A plan overrides capacity, refill (or window) or both; the rest is inherited.
bool read_plans(YamlReader& r, const Field& f, LimitConfig& l, ReadNotes& notes) {
  const auto plans = r.named_mapping(f);
  if (!plans) return false;
  bool ok = true;
  for (const auto& [plan, value] : plans->entries) {
    if (plan.empty()) r.error(value, "plan name must not be empty");
    notes.plan_overrides.push_back({plan, value});
    BucketParams params = l.bucket;
    const auto pm = r.mapping(value, kPlanKeys.keys);
    if (!pm) {
      ok = false;
      continue;
    }
    ok = refuse_other_algorithm(r, *pm, l.algorithm) && ok;
    ok = read_bucket_number(r, pm->get("capacity"), params.capacity) && ok;
    ok = read_bucket_number(r, pm->get("refill_per_second"), params.refill_per_second) && ok;
    ok = read_window(r, pm->get("window_ms"), params.window_seconds) && ok;
    l.plans[plan] = params;
  }
  return ok;
}

// algorithm: token_bucket (the default) or sliding_window.
bool read_algorithm(YamlReader& r, const Field* v, LimitConfig::Algorithm& out) {
  if (!v) return true;
  const auto text = r.string(*v);
  if (!text) return false;
  if (*text == "token_bucket" || *text == "sliding_window") {
    out = *text == "token_bucket" ? LimitConfig::Algorithm::kTokenBucket
                                  : LimitConfig::Algorithm::kSlidingWindow;
    return true;
  }
  r.error(*v, "unknown algorithm " + shown(*text) + " (expected token_bucket or sliding_window)");
  return false;
}

// True when the limit was read without an error.
bool read_limit(YamlReader& r, const Field& f, LimitConfig& l, ReadNotes& notes) {
  const auto m = r.mapping(f, kLimitKeys.keys);
  if (!m) return false;
  bool ok = true;
  if (auto* v = r.required(*m, "key")) ok = read_key_sources(r, *v, l.key, notes) && ok;
  ok = read_algorithm(r, m->get("algorithm"), l.algorithm) && ok;
  const bool window = l.algorithm == LimitConfig::Algorithm::kSlidingWindow;
  const Field* capacity = r.required(*m, "capacity");
  ok = capacity && read_bucket_number(r, capacity, l.bucket.capacity) && ok;
  if (window) {
    const Field* length = r.required(*m, "window_ms");
    ok = length && read_window(r, length, l.bucket.window_seconds) && ok;
  } else {
    const Field* refill = r.required(*m, "refill_per_second");
    ok = refill && read_bucket_number(r, refill, l.bucket.refill_per_second) && ok;
  }
  ok = refuse_other_algorithm(r, *m, l.algorithm) && ok;
  if (auto* v = m->get("shadow")) {
    const auto shadow = r.boolean(*v);
    if (shadow) l.shadow = *shadow;
    ok = shadow.has_value() && ok;
  }
  if (auto* v = m->get("plans")) ok = read_plans(r, *v, l, notes) && ok;
  if (auto* v = m->get("lease_tokens")) {
    ok = read_bucket_number(r, v, l.lease_tokens) && ok;
    if (window) {
      r.error(*v, "needs algorithm: token_bucket (leases are taken from token buckets only)");
      ok = false;
    }
  }
  if (auto* v = m->get("ipv6_prefix")) {
    const auto n = r.integer(*v, 1, 128);
    if (n) l.ipv6_prefix = static_cast<unsigned>(*n);
    ok = n.has_value() && ok;
  }
  return ok;
}

}  // namespace

void read_limits(YamlReader& r, const Field& f, Config& c, ReadNotes& notes) {
  const auto m = r.named_mapping(f);
  if (!m) return;
  notes.limits_read = true;
  for (const auto& [name, value] : m->entries) {
    LimitConfig l;
    l.name = name;
    check_name(r, value, name);
    notes.limit_valid.push_back(read_limit(r, value, l, notes));
    c.limits.push_back(std::move(l));  // kept even if invalid, so routes resolve
  }
}

}  // namespace sluice::config
