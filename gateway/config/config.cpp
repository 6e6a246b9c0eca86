#include "gateway/config/config.hpp"

#include <algorithm>

#include "common/ascii.hpp"

namespace sluice {

namespace {

constexpr std::pair<std::string_view, CalendarPeriod> kCalendarPeriods[] = {
    {"minute", CalendarPeriod::kMinute}, {"hour", CalendarPeriod::kHour},
    {"day", CalendarPeriod::kDay},       {"week", CalendarPeriod::kWeek},
    {"month", CalendarPeriod::kMonth},   {"year", CalendarPeriod::kYear}};

}  // namespace

bool CostFromResponse::counts(unsigned status) const {
  if (statuses.empty()) return true;
  return std::any_of(statuses.begin(), statuses.end(),
                     [status](const auto& range) {
                       return status >= range.first && status <= range.second;
                     });
}

std::string_view calendar_period_name(CalendarPeriod period) {
  if (period == CalendarPeriod::kSecond) return "second";
  for (const auto& [name, p] : kCalendarPeriods) {
    if (p == period) return name;
  }
  return "day";
}

std::optional<CalendarPeriod> calendar_period_named(std::string_view name) {
  for (const auto& [n, p] : kCalendarPeriods) {
    if (n == name) return p;
  }
  return std::nullopt;
}

const LimitConfig::ModelParams* LimitConfig::for_model(std::string_view model) const {
  const ModelParams* best = nullptr;
  std::size_t best_prefix = 0;
  for (const auto& entry : models) {
    const std::string_view pattern = entry.pattern;
    if (!pattern.ends_with('*')) {
      if (pattern == model) return &entry;  // an exact name wins
      continue;
    }
    const std::string_view prefix = pattern.substr(0, pattern.size() - 1);
    if (model.starts_with(prefix) && (!best || prefix.size() > best_prefix)) {
      best = &entry;
      best_prefix = prefix.size();
    }
  }
  return best;
}

const BucketParams& LimitConfig::for_plan(std::string_view plan) const {
  const auto it = plans.find(std::string(plan));
  return it == plans.end() ? bucket : it->second;
}

IpAccessConfig::Result IpAccessConfig::check(const IpAddress& ip) const {
  if (!table) return Result::kAllowed;
  const auto verdict = table->find(ip);
  if (!verdict) return has_allow ? Result::kNotAllowed : Result::kAllowed;
  return *verdict == IpPrefixTable::Verdict::kDeny ? Result::kDenied : Result::kAllowed;
}

bool CorsConfig::allows(std::string_view origin) const {
  // "null" (a sandboxed page, a file, a redirect) is no site: never listed.
  if (origin.empty() || origin == "null") return false;
  if (any_origin) return true;
  for (const auto& exact : origins) {
    if (ascii::iequals(origin, exact)) return true;
  }
  for (const auto& w : wildcards) {
    // One label or more before the suffix, in the scheme written.
    if (origin.size() <= w.scheme.size() + w.suffix.size()) continue;
    if (!ascii::iequals(origin.substr(0, w.scheme.size()), w.scheme)) continue;
    if (!ascii::iequals(origin.substr(origin.size() - w.suffix.size()), w.suffix)) continue;
    const auto labels =
        origin.substr(w.scheme.size(), origin.size() - w.scheme.size() - w.suffix.size());
    if (labels.find_first_of("/:@?#") == std::string_view::npos) return true;
  }
  return false;
}

bool is_known_plan(const Config& config, std::string_view plan) {
  if (!config.plans.empty()) {
    return std::find(config.plans.begin(), config.plans.end(), plan) != config.plans.end();
  }
  if (plan == config.api_keys.default_plan) return true;
  for (const auto& consumer : config.api_keys.consumers) {
    if (consumer.plan == plan) return true;
  }
  return std::any_of(config.limits.begin(), config.limits.end(), [&](const LimitConfig& limit) {
    return limit.plans.count(std::string(plan)) > 0;
  });
}

const UpstreamConfig* Config::find_upstream(std::string_view name) const {
  const auto it = std::find_if(upstreams.begin(), upstreams.end(),
                               [&](const UpstreamConfig& u) { return u.name == name; });
  return it == upstreams.end() ? nullptr : &*it;
}

const LimitConfig* Config::find_limit(std::string_view name) const {
  const auto it = std::find_if(limits.begin(), limits.end(),
                               [&](const LimitConfig& l) { return l.name == name; });
  return it == limits.end() ? nullptr : &*it;
}

std::string_view to_string(RedisConfig::Topology topology) noexcept {
  switch (topology) {
    case RedisConfig::Topology::kStandalone:
      return "standalone";
    case RedisConfig::Topology::kSentinel:
      return "sentinel";
    case RedisConfig::Topology::kCluster:
      return "cluster";
  }
  return "standalone";
}

}  // namespace sluice
