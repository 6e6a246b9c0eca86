#include "services/rls/rls_call.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <unordered_set>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "gateway/config/rls_config.hpp"
#include "gateway/metrics.hpp"
#include "middleware/ratelimit/admin/bucket_endpoint.hpp"
#include "middleware/ratelimit/algorithms/quota_calendar.hpp"
#include "middleware/ratelimit/audit/decision_fields.hpp"
#include "middleware/ratelimit/audit/denial_audit.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/local_layer.hpp"
#include "services/rls/rls_matcher.hpp"
#include "upstream/redis/redis_clock.hpp"

namespace sluice {
namespace {

namespace pb = envoy::service::ratelimit::v3;
using Response = pb::RateLimitResponse;

using grpc_code::kInvalidArgument;
using grpc_code::kUnavailable;
constexpr std::size_t kMaxDetailedSeries = 1000;  // per worker, then "other"
constexpr std::size_t kMaxDetailedLabel = 256;     // bytes; a longer one is "other"

RlsReply refused(unsigned status, std::string message) {
  return {status, std::move(message), {}};
}

// What one descriptor of the call came to before the decision.
struct Planned {
  RlsMatch match;
  const LimitConfig* limit = nullptr;  // null: not decided (no rule, unlimited, replaced)
  std::shared_ptr<LimitConfig> override_limit;  // Envoy's limit override, when given
  double hits = 1;
  bool replaced = false;
  std::size_t group = 0;  // which decision call
  std::size_t slot = 0;   // its place in that call's descriptors
};

struct Call {
  std::shared_ptr<const Config> config;
  MetricsShard* metrics = nullptr;
  std::shared_ptr<DenialAudit> audit;
  std::string domain_label;
  std::vector<Planned> planned;
  std::vector<std::vector<LimitDescriptor>> groups;
  std::vector<double> group_hits;
  std::vector<RateDecision> decisions;
  std::error_code error;
  std::size_t pending = 0;
  RlsDone done;
};

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
  call.audit->denied(Denial{"rls:" + call.domain_label, bucket.limit, denied_caller({}, bucket),
                            {}, reset.seconds() * 1000 + (reset.nanos() + 999999) / 1000000});
}

void respond(Call& call) {
  const RlsConfig& rls = *call.config->rls;
  Response response;
  bool over = false;
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
    if (rule && rule->unlimited && !p.override_limit) {
      status.set_limit_remaining(std::numeric_limits<std::uint32_t>::max());
      count(call, p, "unlimited");
      continue;
    }
    if (!p.limit) {
      count(call, p, p.replaced ? "replaced" : "no_rule");
      continue;
    }
    Response::RateLimit& current = *status.mutable_current_limit();
    if (rule && !rule->name.empty()) current.set_name(rule->name);
    current.set_requests_per_unit(clamp_u32(p.limit->bucket.capacity));
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
      if (!over && !failed && call.audit) note_denial(call, p, status);
    }
    count(call, p, short_of_hits ? (shadow ? "shadow_over_limit" : "over_limit") : "ok");
    // The headers' descriptor: the first that denies, else the enforced one
    // with the least remaining.
    if (!shadow && !over) {
      const bool less = !tightest || status.limit_remaining() < tightest->limit_remaining();
      if (denies || less) tightest = &status;
    }
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

// A quota of `n` per `unit` (RateLimitUnit numbering: no week), the size Envoy asks for.
std::shared_ptr<LimitConfig> override_quota(std::uint32_t n, int unit) {
  const auto* found = std::find_if(std::begin(kRlsUnits), std::end(kRlsUnits),
                                   [unit](const RlsUnit& u) { return u.number == unit; });
  if (found == std::end(kRlsUnits) || found->period == CalendarPeriod::kWeek) return nullptr;
  auto limit = std::make_shared<LimitConfig>();
  limit->name = "override";
  limit->algorithm = LimitAlgorithm::kQuota;
  limit->period = found->period;
  limit->bucket.capacity = n;
  return limit;
}

}  // namespace

void decide_rls_call(const BucketWorker& worker, std::string_view bytes, RlsDone done) {
  auto call = std::make_shared<Call>();
  call->config = *worker.config;
  call->metrics = worker.metrics;
  call->audit = worker.audit;
  call->done = std::move(done);
  const RlsConfig* rls = call->config->rls.get();
  if (!rls) return call->done(refused(kUnavailable, "the rate-limit service is not configured"));
  pb::RateLimitRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return call->done(refused(kInvalidArgument, "not a RateLimitRequest"));
  }
  if (request.domain().empty()) {
    return call->done(refused(kInvalidArgument, "rate limit domain must not be empty"));
  }
  if (request.descriptors_size() == 0) {
    return call->done(refused(kInvalidArgument, "rate limit descriptor list must not be empty"));
  }
  if (static_cast<std::size_t>(request.descriptors_size()) > rls->max_descriptors) {
    return call->done(refused(kInvalidArgument, "more than " +
                                                    std::to_string(rls->max_descriptors) +
                                                    " descriptors (rls.max_descriptors)"));
  }
  const RlsDomain* domain = rls->find(request.domain());
  call->domain_label = domain ? domain->domain : "unknown";
  const double request_hits = request.hits_addend() ? request.hits_addend() : 1;
  std::vector<RlsEntry> entries;
  std::vector<std::string> replaced_names;
  call->planned.resize(static_cast<std::size_t>(request.descriptors_size()));
  for (int i = 0; i < request.descriptors_size(); ++i) {
    const auto& descriptor = request.descriptors(i);
    Planned& p = call->planned[static_cast<std::size_t>(i)];
    if (descriptor.entries_size() == 0) {
      return call->done(refused(kInvalidArgument, "a descriptor without entries"));
    }
    entries.clear();
    for (const auto& entry : descriptor.entries()) entries.emplace_back(entry.key(), entry.value());
    p.hits = descriptor.has_hits_addend() ? static_cast<double>(descriptor.hits_addend().value())
                                          : request_hits;
    if (domain) p.match = match_rls_descriptor(*domain, entries);
    if (descriptor.has_limit()) {
      p.override_limit =
          override_quota(descriptor.limit().requests_per_unit(), descriptor.limit().unit());
    }
    if (!domain) p.override_limit = nullptr;  // an unknown domain limits nothing
    if (p.override_limit && p.match.bucket_input.empty()) {
      p.match.bucket_input = rls_override_bucket(request.domain(), entries);
    }
    // An override is a bare limit, replacing nothing; an unlimited rule's
    // replaces count (as envoyproxy/ratelimit collects them).
    const RlsRule* rule = p.match.rule;
    if (rule && !p.override_limit) {
      for (const auto& name : rule->replaces) replaced_names.push_back(name);
    }
  }
  // Replaced rules, then the buckets to decide, grouped by their hits.
  for (Planned& p : call->planned) {
    const RlsRule* rule = p.match.rule;
    if (p.override_limit) {
      p.limit = p.override_limit.get();
    } else if (rule && !rule->unlimited && rule->limit) {
      p.replaced = !rule->name.empty() && std::find(replaced_names.begin(), replaced_names.end(),
                                                    rule->name) != replaced_names.end();
      if (!p.replaced) p.limit = rule->limit.get();
    }
    if (!p.limit) continue;
    auto at = std::find(call->group_hits.begin(), call->group_hits.end(), p.hits);
    if (at == call->group_hits.end()) {
      call->group_hits.push_back(p.hits);
      call->groups.emplace_back();
      at = call->group_hits.end() - 1;
    }
    p.group = static_cast<std::size_t>(at - call->group_hits.begin());
    auto& group = call->groups[p.group];
    p.slot = group.size();
    LimitDescriptor d = limit_descriptor(
        *p.limit, p.limit->bucket,
        bucket_key_hash(p.match.bucket_input, call->config->redis.key_secret));
    if (rule && rule->shadow && !p.override_limit) d.shadow = true;
    group.push_back(std::move(d));
  }
  call->decisions.resize(call->groups.size());
  call->pending = call->groups.size();
  if (call->pending == 0) return respond(*call);
  for (std::size_t g = 0; g < call->groups.size(); ++g) {
    worker.layer->decide(call->groups[g], call->group_hits[g],
                         [call, g](std::error_code ec, RateDecision&& decision) {
                           if (ec) call->error = ec;
                           call->decisions[g] = std::move(decision);
                           if (--call->pending == 0) respond(*call);
                         });
  }
}

}  // namespace sluice
