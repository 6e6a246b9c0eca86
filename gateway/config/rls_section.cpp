// rls: the Envoy rate-limit service's listener and its domains. A domain is
// written as envoyproxy/ratelimit writes one (domain, descriptors with key,
// value, rate_limit {unit, requests_per_unit, unlimited, name, replaces},
// shadow_mode, detailed_metric, value_to_metric, share_threshold and nested
// descriptors), inline or in files of its own format, loaded unchanged; a
// rate_limit may also name a limit of the limits section (limit: NAME), and
// an entry may be an API key (api_key: true), resolved to its consumer.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/ascii.hpp"
#include "gateway/config/keys.hpp"
#include "gateway/config/rls_config.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"
#include "gateway/tls/server_tls.hpp"

namespace sluice::config {
namespace {

constexpr std::size_t kMaxDepth = 16;
constexpr std::int64_t kMaxDescriptors = 1024;
constexpr std::int64_t kMaxConnections = 100000;
constexpr std::size_t kMaxFileBytes = 16u << 20;

void read_rate_limit(YamlReader& r, const Field& f, const Config& c, RlsRule& rule) {
  const auto m = r.mapping(f, kRlsRateLimitKeys.keys);
  if (!m) return;
  if (auto* v = m->get("name")) {
    if (auto s = r.nonempty_string(*v)) rule.name = *s;
  }
  if (auto* v = m->get("replaces")) {
    if (auto items = r.list(*v)) {
      for (const auto& item : *items) {
        const auto entry = r.mapping(item, kRlsReplacesKeys.keys);
        if (!entry) continue;
        if (auto* name = r.required(*entry, "name")) {
          if (auto s = r.nonempty_string(*name)) rule.replaces.push_back(*s);
        }
      }
    }
  }
  if (auto* v = m->get("unlimited")) {
    if (auto b = r.boolean(*v)) rule.unlimited = *b;
  }
  const Field* unit = m->get("unit");
  const Field* per_unit = m->get("requests_per_unit");
  const Field* named = m->get("limit");
  for (const auto& replaced : rule.replaces) {
    if (!rule.name.empty() && replaced == rule.name) {
      r.error(f, "a rate_limit cannot replace itself (" + shown(replaced) + ")");
    }
  }
  if (rule.unlimited) {
    if (unit || named) r.error(f, "an unlimited rate_limit has no unit or limit");
    return;
  }
  if (named) {
    if (unit || per_unit) {
      r.error(*named, "a rate_limit is a limit, or a unit and requests_per_unit, not both");
    }
    const auto name = r.nonempty_string(*named);
    if (!name) return;
    const LimitConfig* limit = c.find_limit(*name);
    if (!limit) return r.error(*named, "unknown limit " + shown(*name));
    rule.limit_name = *name;
    auto copy = std::make_shared<LimitConfig>(*limit);
    copy->name = rule.stat_key;
    rule.limit = std::move(copy);
    return;
  }
  if (!unit) return r.error(f, "needs unit (or unlimited: true, or limit: NAME)");
  const auto text = r.nonempty_string(*unit);
  // Absent, as in envoyproxy/ratelimit: 0 (every call over the limit).
  const auto n =
      per_unit ? r.integer(*per_unit, 0, 4294967295LL) : std::optional<std::int64_t>(0);
  if (!text || !n) return;
  const auto found = std::find_if(std::begin(kRlsUnits), std::end(kRlsUnits),
                                  [&](const RlsUnit& u) { return ascii::iequals(u.name, *text); });
  if (found == std::end(kRlsUnits)) {
    return r.error(*unit, "unknown unit " + shown(*text) +
                              " (expected second, minute, hour, day, week, month or year)");
  }
  rule.unit = found->number;
  rule.requests_per_unit = static_cast<std::uint32_t>(*n);
  auto limit = std::make_shared<LimitConfig>();
  limit->name = rule.stat_key;
  limit->algorithm = LimitAlgorithm::kQuota;
  limit->period = found->period;
  limit->bucket.capacity = static_cast<double>(*n);
  rule.limit = std::move(limit);
}

// Where a rule sits: its parent's stat_key, its depth, and whether an entry
// above it is an API key.
struct RulePlace {
  std::string parent;
  std::size_t depth = 1;
  bool under_api_key = false;
};

void read_rules(YamlReader& r, const Field& f, const Config& c, const RulePlace& place,
                std::vector<RlsRule>& out);

// What an API key's entry or a concurrency rule's (a request's id) cannot be:
// matched by value, nor written into a metric label.
void check_secret_entry(YamlReader& r, const Field& f, const RlsRule& rule, const char* what) {
  if (!rule.value.empty()) r.error(f, std::string(what) + " matches any value: give it no value");
  if (rule.detailed_metric || rule.value_to_metric) {
    r.error(f, std::string(what) + " never goes into a metric label: no detailed_metric or "
                                   "value_to_metric");
  }
}

void read_rule(YamlReader& r, const Field& f, const Config& c, const RulePlace& place,
               RlsRule& rule) {
  const auto m = r.mapping(f, kRlsDescriptorKeys.keys);
  if (!m) return;
  if (auto* v = r.required(*m, "key")) {
    if (auto s = r.nonempty_string(*v)) rule.key = *s;
  }
  if (auto* v = m->get("value")) {
    if (auto s = r.string(*v)) rule.value = *s;
  }
  rule.wildcard = rule.value.find('*') != std::string::npos;
  rule.stat_key = place.parent + "." + rule.key + (rule.value.empty() ? "" : "_" + rule.value);
  const std::pair<std::string_view, bool*> flags[] = {{"shadow_mode", &rule.shadow},
                                                      {"detailed_metric", &rule.detailed_metric},
                                                      {"value_to_metric", &rule.value_to_metric},
                                                      {"share_threshold", &rule.share_threshold},
                                                      {"api_key", &rule.api_key}};
  for (const auto& [key, target] : flags) {
    if (auto* v = m->get(key)) {
      if (auto b = r.boolean(*v)) *target = *b;
    }
  }
  // metadata: accepted (envoyproxy/ratelimit returns it as dynamic metadata;
  // Sluice does not), its content not read.
  if (auto* v = m->get("quota_mode")) {
    if (auto b = r.boolean(*v); b && *b) r.error(*v, "quota_mode is not supported");
  }
  if (rule.share_threshold && !rule.wildcard) {
    r.error(*m->get("share_threshold"), "share_threshold needs a value with a '*'");
  }
  if (rule.api_key) {
    check_secret_entry(r, f, rule, "an api_key entry");
    if (place.under_api_key) r.error(f, "an api_key entry below another api_key entry");
  }
  if (auto* v = m->get("rate_limit")) read_rate_limit(r, *v, c, rule);
  const bool concurrency = rule.concurrency();
  if (concurrency) {
    check_secret_entry(r, f, rule, "a concurrency limit's entry (the request's id)");
    if (rule.api_key) r.error(f, "a concurrency limit's entry is the request's id, not an API key");
  }
  if (auto* v = m->get("descriptors")) {
    if (concurrency) {
      return r.error(*v, "a concurrency limit's rule ends its descriptor (a release call adds " +
                             std::string(kRlsReleaseEntry) + " after it)");
    }
    if (place.depth >= kMaxDepth) return r.error(*v, "descriptors nested deeper than 16 levels");
    read_rules(r, *v, c, {rule.stat_key, place.depth + 1, place.under_api_key || rule.api_key},
               rule.children);
  }
}

void read_rules(YamlReader& r, const Field& f, const Config& c, const RulePlace& place,
                std::vector<RlsRule>& out) {
  const auto items = r.list(f);
  if (!items) return;
  std::vector<const Field*> fields;  // each rule's item, in out's order
  for (const auto& item : *items) {
    RlsRule rule;
    read_rule(r, item, c, place, rule);
    const bool twice = std::any_of(out.begin(), out.end(), [&](const RlsRule& other) {
      return other.key == rule.key && other.value == rule.value;
    });
    if (twice && !rule.key.empty()) {
      r.error(item, "descriptor " + shown(rule.key + (rule.value.empty() ? "" : "_" + rule.value)) +
                        " given twice at this level");
      continue;
    }
    out.push_back(std::move(rule));
    fields.push_back(&item);
  }
  // An api_key node takes every value of its key: another node of that key
  // at its level would match keys by value (and could name them in metrics).
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!out[i].api_key) continue;
    const auto same = std::count_if(out.begin(), out.end(),
                                    [&](const RlsRule& other) { return other.key == out[i].key; });
    if (same > 1) {
      r.error(*fields[i], "an api_key entry " + shown(out[i].key) +
                              " cannot share its key with another descriptor at its level");
    }
  }
}

// One domain: {domain, descriptors}, from rls.domains or a file.
void read_domain(YamlReader& r, const Field& f, const Config& c, std::string source,
                 std::vector<RlsDomain>& out) {
  const auto m = r.mapping(f, kRlsDomainKeys.keys);
  if (!m) return;
  RlsDomain domain;
  domain.source = std::move(source);
  const Field* name = r.required(*m, "domain");
  if (name) {
    if (auto s = r.nonempty_string(*name)) domain.domain = *s;
  }
  if (auto* v = m->get("descriptors")) read_rules(r, *v, c, {domain.domain}, domain.descriptors);
  if (domain.domain.empty()) return;
  const bool twice = std::any_of(out.begin(), out.end(), [&](const RlsDomain& d) {
    return d.domain == domain.domain;
  });
  if (twice) return r.error(*name, "domain " + shown(domain.domain) + " given twice");
  out.push_back(std::move(domain));
}

// An envoyproxy/ratelimit configuration file, read as it is; its errors
// named by its own lines, reported at the entry of rls.config_files.
void read_domain_file(YamlReader& r, const Field& f, const Config& c, RlsConfig& rls) {
  const auto path = r.nonempty_string(f);
  if (!path) return;
  std::ifstream file(*path, std::ios::binary);
  if (!file) return r.error(f, "cannot read " + shown(*path));
  std::ostringstream text;
  text << file.rdbuf();
  if (text.str().size() > kMaxFileBytes) return r.error(f, "larger than 16 MiB: " + shown(*path));
  YamlReader own(*path, r.env());
  own.read_document(text.str(), [&](const Field& root) {
    read_domain(own, root, c, *path, rls.domains);
  });
  for (const auto& error : own.take_errors()) r.error(f, error);
}

void read_rls_tls(YamlReader& r, const Field& f, RlsConfig& rls) {
  const auto m = r.mapping(f, kRlsTlsKeys.keys);
  if (!m) return;
  auto pair = read_certificate_pair(r, *m);
  if (!pair) return;
  TlsConfig tls;
  tls.certificates.push_back(std::move(*pair));
  tls.http2 = true;  // gRPC: ALPN h2
  std::string error;
  rls.tls = ServerTls::build(tls, error);
  if (!rls.tls) r.error(f, error);
}

}  // namespace

void read_rls(YamlReader& r, const Field& f, Config& c) {
  const auto m = r.mapping(f, kRlsKeys.keys);
  if (!m) return;
  auto built = std::make_shared<RlsConfig>();
  RlsConfig& rls = *built;
  c.rls = built;
  if (auto* v = r.required(*m, "listen")) rls.listen = read_address(r, *v, true);
  if (auto* v = m->get("tls")) read_rls_tls(r, *v, rls);
  if (auto* v = m->get("on_redis_failure")) {
    if (auto s = r.string(*v)) {
      if (*s == "error") {
        rls.on_redis_failure = RlsConfig::OnFailure::kError;
      } else if (*s == "open") {
        rls.on_redis_failure = RlsConfig::OnFailure::kOpen;
      } else if (*s == "closed") {
        rls.on_redis_failure = RlsConfig::OnFailure::kClosed;
      } else {
        r.error(*v, "must be error, open or closed" + YamlReader::got(*v, *s));
      }
    }
  }
  if (auto* v = m->get("response_headers")) {
    if (auto b = r.boolean(*v)) rls.response_headers = *b;
  }
  if (auto* v = m->get("max_connections")) {
    if (auto n = r.integer(*v, 1, kMaxConnections)) {
      rls.max_connections = static_cast<std::size_t>(*n);
    }
  }
  if (auto* v = m->get("max_descriptors")) {
    if (auto n = r.integer(*v, 1, kMaxDescriptors)) {
      rls.max_descriptors = static_cast<std::size_t>(*n);
    }
  }
  if (auto* v = m->get("domains")) {
    if (auto items = r.list(*v)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        read_domain(r, (*items)[i], c, "rls.domains[" + std::to_string(i) + "]", rls.domains);
      }
    }
  }
  if (auto* v = m->get("config_files")) {
    if (auto items = r.list(*v)) {
      for (const auto& item : *items) {
        if (auto path = r.nonempty_string(item)) rls.config_files.push_back(*path);
        read_domain_file(r, item, c, rls);
      }
    }
  }
}

}  // namespace sluice::config
