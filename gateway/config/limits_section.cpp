// limits: the named token buckets, sliding windows and quotas, what keys
// them, and per-plan overrides.
#include <algorithm>
#include <vector>

#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"
#include "gateway/config/usage_expression.hpp"
#include "gateway/tls/client_certificate.hpp"

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
                                                             {"global", Kind::kGlobal},
                                                             {"org", Kind::kOrg}};
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
  if (t.starts_with("cert:")) {
    const auto field = t.substr(5);
    if (!is_client_certificate_field(field)) {
      r.error(f, "unknown certificate field in " + shown(t) +
                     " (expected subject, san_uri, san_dns or fingerprint)");
      return std::nullopt;
    }
    return KeySource{Kind::kCert, std::string(field)};
  }
  if (t.starts_with("jwt:")) {
    const auto path = t.substr(4);
    if (auto why = claim_path_problem(path); !why.empty()) {
      r.error(f, why + " in " + shown(t));
      return std::nullopt;
    }
    return KeySource{Kind::kJwt, std::string(path)};
  }
  if (t.starts_with("body:")) {
    std::vector<std::string> path;
    std::string why;
    if (!usage::parse_member_path(t.substr(5), path, why)) {
      r.error(f, why + " in " + shown(t));
      return std::nullopt;
    }
    return KeySource{Kind::kBody, std::string(t.substr(5))};
  }
  r.error(f, "unknown key source " + shown(t) +
                 " (expected api_key, ip, path, route, global, org, header:NAME, query:NAME, "
                 "jwt:CLAIM, cert:FIELD or body:PATH)");
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

// Sets `target` from an optional key; false when the key is given but
// invalid. A positive value below kMinBucketNumber is refused: such a
// capacity never admits a request, and such a rate turns the scripts'
// arithmetic (time to full, retry-after) into overflow.
bool read_bucket_number(YamlReader& r, const Field* v, double& target) {
  if (!v) return true;
  const auto n = r.positive_number(*v);
  if (n && *n < kMinBucketNumber) {
    r.error(*v,
            "must be at least 0.000001 (a smaller positive value is a typo: one token in "
            "11.6 days at that rate)" +
                YamlReader::got(*v, v->node.Scalar()));
    return false;
  }
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

// A field of another algorithm than the limit's, if given, is an error
// (once, naming the first algorithm that has it).
bool refuse_other_algorithm(YamlReader& r, const Mapping& m, LimitAlgorithm algorithm) {
  const AlgorithmName& own = algorithm_name(algorithm);
  bool ok = true;
  std::vector<std::string_view> refused;
  for (const AlgorithmName& other : kAlgorithmNames) {
    if (other.algorithm == algorithm) continue;
    for (const std::string_view field : {other.required, other.optional}) {
      if (field.empty() || field == own.required || field == own.optional) continue;
      if (std::find(refused.begin(), refused.end(), field) != refused.end()) continue;
      refused.push_back(field);
      if (const Field* v = m.get(field)) {
        // Written for the default algorithm, the field names the one it needs.
        std::string message = "is not used by algorithm " + std::string(own.name);
        if (!own.required.empty()) {
          message += " (it admits capacity per " + std::string(own.required) + ")";
        }
        if (algorithm == LimitAlgorithm::kTokenBucket) {
          message = "needs algorithm: " + std::string(other.name);
        }
        r.error(*v, message);
        ok = false;
      }
    }
  }
  return ok;
}

// A sliding log's capacity (the limit's or a plan's) above the cap is an error.
bool check_log_capacity(YamlReader& r, const Field* v, const LimitConfig& l, double capacity) {
  if (v == nullptr || l.algorithm != LimitAlgorithm::kSlidingLog ||
      capacity <= kMaxSlidingLogCapacity) {
    return true;
  }
  r.error(*v,
          "must be at most 10000 for algorithm sliding_log (it keeps one entry per unit "
          "admitted within window_ms)");
  return false;
}

// The sizes of one override (a plan's, a model's): capacity, refill or
// window, each inherited from `params` when not given.
bool read_sizes(YamlReader& r, const Mapping& m, const LimitConfig& l, BucketParams& params) {
  bool ok = refuse_other_algorithm(r, m, l.algorithm);
  ok = read_bucket_number(r, m.get("capacity"), params.capacity) && ok;
  ok = check_log_capacity(r, m.get("capacity"), l, params.capacity) && ok;
  ok = read_bucket_number(r, m.get("refill_per_second"), params.refill_per_second) && ok;
  ok = read_window(r, m.get("window_ms"), params.window_seconds) && ok;
  return ok;
}

// A plan overrides capacity, refill (or window) or both; the rest is
// inherited. A quota's plan overrides its capacity only.
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
    ok = read_sizes(r, *pm, l, params) && ok;
    l.plans[plan] = params;
  }
  return ok;
}

// models: sizes per model, as a plan's are (inheriting the limit's own),
// each with plan overrides of its own (inheriting the model's).
bool read_models(YamlReader& r, const Field& f, LimitConfig& l, ReadNotes& notes) {
  const auto models = r.named_mapping(f);
  if (!models) return false;
  const bool keyed = std::any_of(l.key.begin(), l.key.end(), [](const KeySource& k) {
    return k.kind == KeySource::Kind::kBody;
  });
  if (!keyed) {
    r.error(f, "needs a body: part in the limit's key, whose value picks the entry (key: "
               "[api_key, body:model])");
    return false;
  }
  bool ok = true;
  for (const auto& [pattern, value] : models->entries) {
    const auto star = pattern.find('*');
    if (pattern.empty() || (star != std::string::npos && star + 1 != pattern.size())) {
      r.error(value, "a model name, or a prefix ending in * (\"small-*\"), got " + shown(pattern));
      ok = false;
      continue;
    }
    LimitConfig::ModelParams entry{pattern, l.bucket, {}};
    const auto mm = r.mapping(value, kModelKeys.keys);
    if (!mm) {
      ok = false;
      continue;
    }
    ok = read_sizes(r, *mm, l, entry.bucket) && ok;
    if (const Field* p = mm->get("plans")) {
      const auto plans = r.named_mapping(*p);
      if (!plans) ok = false;
      for (const auto& [plan, pv] : plans ? plans->entries : decltype(plans->entries){}) {
        notes.plan_overrides.push_back({plan, pv});
        BucketParams params = entry.bucket;
        const auto pm = r.mapping(pv, kModelPlanKeys.keys);
        ok = pm && read_sizes(r, *pm, l, params) && ok;
        entry.plans[plan] = params;
      }
    }
    l.models.push_back(std::move(entry));
  }
  return ok;
}

// algorithm: token_bucket (the default), sliding_window, quota, sliding_log or
// concurrency.
bool read_algorithm(YamlReader& r, const Field* v, LimitAlgorithm& out) {
  if (!v) return true;
  const auto text = r.string(*v);
  if (!text) return false;
  if (const auto named = algorithm_named(*text)) {
    out = *named;
    return true;
  }
  r.error(*v, "unknown algorithm " + shown(*text) +
                  " (expected token_bucket, sliding_window, quota, sliding_log or concurrency)");
  return false;
}

// period: minute, hour, day, week, month or year.
bool read_period(YamlReader& r, const Field& v, CalendarPeriod& out) {
  const auto text = r.string(v);
  if (!text) return false;
  if (const auto named = calendar_period_named(*text)) {
    out = *named;
    return true;
  }
  r.error(v,
          "unknown period " + shown(*text) + " (expected minute, hour, day, week, month or year)");
  return false;
}

bool read_timezone(YamlReader& r, const Field& v, TimeZone& out) {
  const auto text = r.string(v);
  if (!text) return false;
  std::string why;
  auto tz = parse_time_zone(*text, why);
  if (!tz) {
    r.error(v, "invalid timezone " + shown(*text) + ": " + why);
    return false;
  }
  out = std::move(*tz);
  return true;
}

// The fields of the limit's own algorithm besides capacity.
bool read_algorithm_fields(YamlReader& r, const Mapping& m, LimitConfig& l) {
  if (l.algorithm == LimitAlgorithm::kConcurrency) {
    const Field* lease = m.get("lease_ms");
    if (!lease) return true;
    const auto ms = read_duration(r, *lease);
    if (ms && ms->count() < 1000) {
      r.error(*lease, "must be at least 1000 (slots are renewed every third of it)");
      return false;
    }
    if (ms) l.lease = *ms;
    return ms.has_value();
  }
  const Field* own = r.required(m, algorithm_name(l.algorithm).required);
  if (!own) return false;
  switch (l.algorithm) {
    case LimitAlgorithm::kConcurrency:
      return true;
    case LimitAlgorithm::kTokenBucket:
      return read_bucket_number(r, own, l.bucket.refill_per_second);
    case LimitAlgorithm::kSlidingWindow:
    case LimitAlgorithm::kSlidingLog:
      return read_window(r, own, l.bucket.window_seconds);
    case LimitAlgorithm::kQuota: {
      bool ok = read_period(r, *own, l.period);
      if (const Field* tz = m.get("timezone")) ok = read_timezone(r, *tz, l.timezone) && ok;
      return ok;
    }
  }
  return false;
}

// True when the limit was read without an error.
bool read_limit(YamlReader& r, const Field& f, LimitConfig& l, ReadNotes& notes) {
  const auto m = r.mapping(f, kLimitKeys.keys);
  if (!m) return false;
  bool ok = true;
  if (auto* v = r.required(*m, "key")) ok = read_key_sources(r, *v, l.key, notes) && ok;
  ok = read_algorithm(r, m->get("algorithm"), l.algorithm) && ok;
  const Field* capacity = r.required(*m, "capacity");
  ok = capacity && read_bucket_number(r, capacity, l.bucket.capacity) && ok;
  ok = read_algorithm_fields(r, *m, l) && ok;
  ok = check_log_capacity(r, capacity, l, l.bucket.capacity) && ok;
  ok = refuse_other_algorithm(r, *m, l.algorithm) && ok;
  if (auto* v = m->get("shadow")) {
    const auto shadow = r.boolean(*v);
    if (shadow) l.shadow = *shadow;
    ok = shadow.has_value() && ok;
  }
  if (auto* v = m->get("client_headers")) {
    const auto shown_headers = read_client_headers(r, *v);
    if (shown_headers) l.client_headers = *shown_headers;
    ok = shown_headers.has_value() && ok;
  }
  if (auto* v = m->get("plans")) ok = read_plans(r, *v, l, notes) && ok;
  if (auto* v = m->get("models")) ok = read_models(r, *v, l, notes) && ok;
  if (auto* v = m->get("lease_tokens")) {
    ok = read_bucket_number(r, v, l.lease_tokens) && ok;
    if (l.algorithm != LimitAlgorithm::kTokenBucket) {
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
