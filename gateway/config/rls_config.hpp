// rls: Sluice's limiter served to Envoy as a rate-limit service (RLS v3):
// where it listens, and the domains' descriptor trees in the shape of
// envoyproxy/ratelimit's configuration (inline, or its files unchanged).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/config/config.hpp"

namespace sluice {

// The units of a rate_limit: RateLimitResponse.RateLimit.Unit's numbers (also
// RateLimitUnit's, but for week), their names in a rule, and the quota period
// each counts in.
struct RlsUnit {
  std::string_view name;
  int number;
  CalendarPeriod period;
};
inline constexpr RlsUnit kRlsUnits[] = {{"second", 1, CalendarPeriod::kSecond},
                                        {"minute", 2, CalendarPeriod::kMinute},
                                        {"hour", 3, CalendarPeriod::kHour},
                                        {"day", 4, CalendarPeriod::kDay},
                                        {"week", 7, CalendarPeriod::kWeek},
                                        {"month", 5, CalendarPeriod::kMonth},
                                        {"year", 6, CalendarPeriod::kYear}};

// One node of a domain's descriptor tree: an entry key, and a value (exact,
// with '*' wildcards, or none: any value), its limit when a descriptor ends
// here, and the nodes below it.
struct RlsRule {
  std::string key;
  std::string value;      // empty: any value
  bool wildcard = false;  // value holds a '*'
  // Its limit: a quota per unit (rate_limit: unit, requests_per_unit), or a
  // limit of the limits section (rate_limit: {limit: NAME}); none without.
  // A concurrency limit's rule ends a descriptor whose last entry is the
  // request's id (the slot it takes), given back by a release call.
  std::shared_ptr<const LimitConfig> limit;
  std::string limit_name;  // limit: NAME (a store consumer's overrides are by it)
  bool concurrency() const { return limit && limit->algorithm == LimitAlgorithm::kConcurrency; }
  // Never denies: its shadow_mode, or a shadow limit it names.
  bool shadowed() const { return shadow || (limit && limit->shadow); }
  bool unlimited = false;
  std::string name;  // rate_limit.name: what another rule's replaces names
  std::vector<std::string> replaces;
  std::uint32_t requests_per_unit = 0;
  int unit = 0;  // RateLimitResponse.RateLimit.Unit's number (SECOND = 1 ...)
  bool shadow = false;
  bool detailed_metric = false;
  bool value_to_metric = false;
  bool share_threshold = false;
  // Sluice's own: this entry's value is an API key, resolved to its
  // consumer (api_keys.consumers, the consumer store) as a request's would
  // be: buckets below are the consumer's, sized by its plan.
  bool api_key = false;
  std::string stat_key;  // "domain.key_value.key": the rule's place, for metrics
  std::vector<RlsRule> children;
};

// The entry a release call adds after a concurrency rule's descriptor (Envoy's
// generic_key action in an apply_on_stream_done rate limit).
inline constexpr std::string_view kRlsReleaseEntry = "release";

struct RlsDomain {
  std::string domain;
  std::string source;  // the file it came from, or "rls.domains[N]"
  std::vector<RlsRule> descriptors;
};

struct RlsConfig {
  std::optional<HostPort> listen;  // none: no rate-limit service
  std::shared_ptr<const ServerTls> tls;  // rls.tls: gRPC over TLS (ALPN h2); null: h2c
  std::vector<std::string> config_files;
  std::vector<RlsDomain> domains;
  // What a call gets when Redis cannot decide: the gRPC error UNAVAILABLE
  // (Envoy's failure_mode_deny decides), OK, or OVER_LIMIT.
  enum class OnFailure { kError, kOpen, kClosed };
  OnFailure on_redis_failure = OnFailure::kError;
  bool response_headers = false;  // X-RateLimit-* in response_headers_to_add
  std::size_t max_descriptors = 64;
  std::size_t max_connections = 1024;  // in the process; more are closed at once
  std::size_t max_message_bytes = 1u << 20;

  // Whether a rule with a limit has this stat_key (the limit its buckets
  // are named by, as the most-limited view is asked for it).
  bool has_limited_rule(std::string_view stat_key) const {
    for (const auto& d : domains) {
      if (has_limited_rule(d.descriptors, stat_key)) return true;
    }
    return false;
  }
  static bool has_limited_rule(const std::vector<RlsRule>& rules, std::string_view stat_key) {
    for (const auto& rule : rules) {
      if (rule.limit && rule.stat_key == stat_key) return true;
      if (has_limited_rule(rule.children, stat_key)) return true;
    }
    return false;
  }

  const RlsDomain* find(std::string_view domain) const {
    for (const auto& d : domains) {
      if (d.domain == domain) return &d;
    }
    return nullptr;
  }
};

}  // namespace sluice
