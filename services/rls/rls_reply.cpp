#include <cmath>
#include <limits>
#include <unordered_set>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/audit/decision_fields.hpp"
#include "middleware/ratelimit/audit/denial_audit.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/local_layer.hpp"
#include "services/rls/rls_call_state.hpp"
#include "upstream/redis/redis_clock.hpp"

namespace sluice::rls {
namespace {

using Response = pb::RateLimitResponse;
using grpc_code::kUnavailable;

constexpr std::size_t kMaxDetailedSeries = 1000;  // per worker, then "other"
constexpr std::size_t kMaxDetailedLabel = 256;     // bytes; a longer one is "other"

// RateLimitResponse.RateLimit.Unit for a limit's own size, where one fits.
int unit_of(const LimitConfig& limit, const RlsRule* rule) {
  if (rule && rule->unit) return rule->unit;
  if (limit.algorithm == LimitAlgorithm::kQuota) {
    for (const RlsUnit& unit : kRlsUnits) {
      if (unit.period == limit.period) return unit.number;
    }
  }
  const double w = limit.bucket.window_seconds;
  if (w == 1) return Response::RateLimit::SECOND;
  if (w == 60) return Response::RateLimit::MINUTE;
  if (w == 3600) return Response::RateLimit::HOUR;
  if (w == 86400) return Response::RateLimit::DAY;
  return Response::RateLimit::UNKNOWN;
}

std::uint32_t clamp_u32(double v) {
  if (!(v > 0)) return 0;
  return v >= 4294967295.0 ? std::numeric_limits<std::uint32_t>::max()
                           : static_cast<std::uint32_t>(std::floor(v));
}

void set_duration(google::protobuf::Duration& d, double seconds) {
  if (!(seconds > 0)) seconds = 0;
  const auto whole = static_cast<std::int64_t>(std::floor(seconds));
  d.set_seconds(whole);
  d.set_nanos(static_cast<std::int32_t>(std::lround((seconds - static_cast<double>(whole)) * 1e9)) %
              1000000000);
}

// A quota's time to the end of the period holding the store's time now; a
// bucket's or a window's until it is full again.
double until_reset(const LimitDescriptor& d, const LimitState& state) {
  if (d.algorithm != LimitAlgorithm::kQuota) return state.seconds_to_full;
  const auto now = static_cast<double>(redis::server_now_us());
  const double end = now < d.periods.end_us ? d.periods.end_us : d.periods.next_end_us;
  return (end - now) / 1e6;
}

// The metric label of a descriptor's rule: its configured place, or a
// detailed key (values the caller sent) while the worker has room for more.
std::string_view rule_label(const RlsMatch& match) {
  if (!match.rule) return "";
  if (match.metric_key == match.rule->stat_key) return match.metric_key;
  if (match.metric_key.size() > kMaxDetailedLabel) return "other";
  thread_local std::unordered_set<std::string> seen;
  if (seen.count(match.metric_key) || seen.size() < kMaxDetailedSeries) {
    return *seen.insert(match.metric_key).first;
  }
  return "other";
}

void count(Call& call, const Planned& p, std::string_view result) {
  call.metrics->add("sluice_rls_descriptors_total",
                    scratch_labels({{"domain", call.domain_label},
                                    {"rule", rule_label(p.match)},
                                    {"result", result}}));
}

// The call's first denial, for the denial stream and the most-limited view:
// its route "rls:DOMAIN", the rule, and the bucket's fingerprint as the caller.
void note_denial(Call& call, const Planned& p, const Response::DescriptorStatus& status) {
  const LimitDescriptor& bucket = call.groups[p.group][p.slot];
  const auto& reset = status.duration_until_reset();
  // Views the caller's own label (a conditional of "" and a std::string would
  // view a temporary copy).
  const std::string_view label =
      p.caller == kNoCaller ? std::string_view{} : std::string_view{call.callers[p.caller].label};
  call.audit->denied(Denial{"rls:" + call.domain_label, bucket.limit, denied_caller(label, bucket),
                            {}, reset.seconds() * 1000 + (reset.nanos() + 999999) / 1000000});
}

}  // namespace

void respond(Call& call) {
  const RlsConfig& rls = *call.config->rls;
  Response response;
  bool over = false;    // the call is over its limit (a denial or a refused caller)
  bool denied = false;  // a bucket denied it: the first one is noted, its headers sent
  const bool failed = static_cast<bool>(call.error);
  if (failed && rls.on_redis_failure == RlsConfig::OnFailure::kError) {
    call.metrics->add("sluice_rls_calls_total",
                      scratch_labels({{"domain", call.domain_label}, {"code", "error"}}));
    return call.done(refused(kUnavailable, "the limiter's store did not answer"));
  }
  const Response::DescriptorStatus* tightest = nullptr;
  for (const Planned& p : call.planned) {
    Response::DescriptorStatus& status = *response.add_statuses();
    status.set_code(Response::OK);
    const RlsRule* rule = p.match.rule;
    if (p.match.release) {
      const bool lost = p.release_failed || call.release_failed || !p.limit;
      count(call, p, lost ? "release_failed" : "released");
      continue;
    }
    const auto verdict = p.caller == kNoCaller ? RlsCaller::Verdict::kLimited
                                               : call.callers[p.caller].verdict;
    if (p.refused) {
      if (!rule->shadowed()) status.set_code(Response::OVER_LIMIT);
      over = over || !rule->shadowed();
      count(call, p, verdict == RlsCaller::Verdict::kDisabled ? "disabled" : "unknown_key");
      continue;
    }
    if (verdict == RlsCaller::Verdict::kExempt ||
        (rule && rule->unlimited && !p.override_limit)) {
      status.set_limit_remaining(std::numeric_limits<std::uint32_t>::max());
      count(call, p, verdict == RlsCaller::Verdict::kExempt ? "exempt" : "unlimited");
      continue;
    }
    if (call.refused && !p.replaced && (p.override_limit || (rule && rule->limit))) {
      count(call, p, "skipped");  // another descriptor's caller was refused
      continue;
    }
    if (!p.limit) {
      count(call, p, p.replaced ? "replaced" : "no_rule");
      continue;
    }
    Response::RateLimit& current = *status.mutable_current_limit();
    if (rule && !rule->name.empty()) current.set_name(rule->name);
    current.set_requests_per_unit(clamp_u32(call.groups[p.group][p.slot].capacity));
    current.set_unit(static_cast<Response::RateLimit::Unit>(
        unit_of(*p.limit, p.override_limit ? nullptr : rule)));
    // Shadow: the rule's shadow_mode, or a shadow limit it names.
    const bool shadow = call.groups[p.group][p.slot].shadow;
    bool short_of_hits = false;
    if (failed) {
      short_of_hits = rls.on_redis_failure == RlsConfig::OnFailure::kClosed;
    } else {
      const RateDecision& decision = call.decisions[p.group];
      const LimitState& state = decision.limits[p.slot];
      short_of_hits = !state.sufficient;
      // Over its limit: nothing left for the caller, whatever the bucket holds.
      status.set_limit_remaining(short_of_hits && !shadow ? 0 : clamp_u32(state.remaining));
      set_duration(*status.mutable_duration_until_reset(),
                   until_reset(call.groups[p.group][p.slot], state));
    }
    const bool denies = short_of_hits && !shadow;
    if (denies) {
      status.set_code(Response::OVER_LIMIT);
      if (!denied && !failed && call.audit) note_denial(call, p, status);
    }
    count(call, p, short_of_hits ? (shadow ? "shadow_over_limit" : "over_limit") : "ok");
    // The headers' descriptor: the first that denies, else the enforced one
    // with the least remaining.
    if (!shadow && !denied) {
      const bool less = !tightest || status.limit_remaining() < tightest->limit_remaining();
      if (denies || less) tightest = &status;
    }
    denied = denied || denies;
    over = over || denies;
  }
  response.set_overall_code(over ? Response::OVER_LIMIT : Response::OK);
  if (rls.response_headers && tightest && !failed) {
    const auto add = [&](const char* name, std::string value) {
      auto& header = *response.add_response_headers_to_add();
      header.set_key(name);
      header.set_value(std::move(value));
    };
    const auto reset = tightest->duration_until_reset().seconds() +
                       (tightest->duration_until_reset().nanos() > 0 ? 1 : 0);
    add("x-ratelimit-limit", std::to_string(tightest->current_limit().requests_per_unit()));
    add("x-ratelimit-remaining", std::to_string(tightest->limit_remaining()));
    add("x-ratelimit-reset", std::to_string(reset));
  }
  call.metrics->add("sluice_rls_calls_total",
                    scratch_labels({{"domain", call.domain_label},
                                    {"code", over ? "over_limit" : "ok"}}));
  RlsReply reply;
  response.SerializeToString(&reply.message);
  call.done(std::move(reply));
}
}  // namespace sluice::rls
