#include "middleware/ratelimit/metrics.hpp"

#include <algorithm>
#include <vector>

#include "middleware/ratelimit/api_key.hpp"
#include "middleware/ratelimit/exemptions.hpp"
#include "middleware/ratelimit/outcome.hpp"
#include "upstream/redis/error.hpp"

namespace sluice {
namespace {

constexpr MetricFamily kFamilies[] = {
    {"sluice_ratelimit_decisions_total", "counter", "Rate-limit decisions per route and limit."},
    {"sluice_ratelimit_fail_open_total", "counter",
     "Requests forwarded unlimited because Redis could not decide."},
    {"sluice_ratelimit_fail_closed_total", "counter",
     "Requests refused with 503 because Redis could not decide."},
    {"sluice_ratelimit_fail_local_total", "counter",
     "Requests decided by the instance's local share of each limit because Redis could not "
     "decide."},
    {"sluice_ratelimit_missing_key_total", "counter",
     "Requests whose key source was missing and fell back to the client IP (a body: part: to "
     "one shared value)."},
    {"sluice_ratelimit_rejected_total", "counter",
     "Requests refused with 400 because a rate-limit key source was repeated or malformed."},
    {"sluice_ratelimit_exempt_total", "counter",
     "Requests of limited routes that skipped rate limiting: an exempt client address or plan."},
    {"sluice_ratelimit_check_duration_seconds", "histogram", "Time to get a limiter decision."},
    {"sluice_ratelimit_delay_seconds", "histogram",
     "Time delayed requests waited for their reserved tokens before going upstream, by route."},
    {"sluice_ratelimit_delay_abandoned_total", "counter",
     "Delayed requests whose client left while waiting; their reserved tokens were refunded."},
    {"sluice_redis_errors_total", "counter", "Redis errors by kind."},
    {"sluice_redis_commands_total", "counter", "Commands sent to Redis."},
    {"sluice_redis_writes_total", "counter", "Network writes to Redis (pipelining batches)."},
    {"sluice_ratelimit_late_decisions_undone_total", "counter",
     "Admitted requests whose decision Redis ran but answered after the timeout, given back at "
     "once (the request was answered without Redis)."},
    {"sluice_redis_late_replies_total", "counter",
     "Replies Redis sent after their command's timeout (read and thrown away)."},
    {"sluice_redis_up", "gauge",
     "1 when every worker reaches Redis: the server, the primary (sentinel) or every slot's owner "
     "(cluster).",
     MergeRule::kMin},
    {"sluice_redis_redirects_total", "counter", "Redis Cluster MOVED and ASK redirects followed."},
    {"sluice_redis_topology_refresh_total", "counter",
     "Redis Cluster slot map or Sentinel primary lookups, by result."},
    {"sluice_ratelimit_refunds_total", "counter",
     "Refund calls to Redis (unspent leases, and debits of cross-slot requests that were not "
     "admitted), by result."},
    {"sluice_ratelimit_local_decisions_total", "counter",
     "Rate-limit decisions made without Redis: by the denial cache or from leased tokens."},
    {"sluice_ratelimit_leases_total", "counter", "Leases of tokens taken from Redis, by limit."},
    {"sluice_ratelimit_settlements_total", "counter",
     "Requests whose cost was settled from the response, by route and result (refund: it cost less "
     "than its estimate; debit: more; even; failed: Redis never took it; unknown: sent but not "
     "answered in time, so Redis may have applied it)."},
    {"sluice_ratelimit_settled_units_total", "counter",
     "Units given back (refund) or taken (debit) by settlements, per limit, by route."},
    {"sluice_ratelimit_body_usage_total", "counter",
     "Responses whose body was read for its usage (cost_from_response.body), by route and result "
     "(found; missing, invalid, truncated or unreadable: settled at the estimate)."},
    {"sluice_audit_appended_total", "counter",
     "Denials appended to the audit stream (audit.redis_stream)."},
    {"sluice_audit_dropped_total", "counter",
     "Denials the audit stream lost: the worker's queue was full, the stream is off, or Redis did "
     "not take them."},
    {"sluice_ratelimit_top_dropped_total", "counter",
     "Denials the most-limited view lost: beyond what a worker keeps between flushes, or not taken "
     "by Redis."},
    {"sluice_admin_top_requests_total", "counter", "Requests to GET /ratelimit/top, by result."},
    {"sluice_ratelimit_slot_releases_total", "counter",
     "Concurrency slots given back, by result (released; unknown: the last attempt was not "
     "answered in time, so Redis may have freed it; failed: it never reached Redis, and the slot "
     "ends with its lease)."},
    {"sluice_ratelimit_in_flight", "gauge",
     "Concurrency slots this instance holds: requests in progress, by concurrency limit."},
    {"sluice_redis_circuit_open", "gauge", "1 when a worker's Redis circuit breaker is open.",
     MergeRule::kMax},
    {"sluice_fleet_size", "gauge",
     "Instances the local fallback divides each limit by: local.fleet_size, else the live "
     "instances last seen in Redis, else 1.",
     MergeRule::kMax},
    {"sluice_clock_skew_seconds", "gauge",
     "This host's clock minus Redis' (TIME), as last measured: positive when this host is ahead. "
     "Quota periods and decision deadlines follow Redis' clock whatever it is.",
     MergeRule::kMax},
    {"sluice_fleet_heartbeat_failures_total", "counter",
     "Fleet heartbeats Redis did not answer with a live count (the learned fleet size stays)."},
    {"sluice_ratelimit_near_limit_total", "counter",
     "Requests admitted with less than 10 % of a limit left, by route and limit: who is about "
     "to be limited."},
    {"sluice_admin_bucket_requests_total", "counter",
     "Requests to the bucket API (GET/DELETE /ratelimit/buckets/...), by method and result."},
    {"sluice_admin_consumer_requests_total", "counter",
     "Requests to the consumer API (/consumers/...), by method and result."},
    {"sluice_consumer_lookups_total", "counter",
     "API keys looked up among the consumers of the store, by result (hit: cached, miss: asked "
     "Redis, unknown: no consumer holds it, error: Redis did not answer)."},
    {"sluice_consumers_cached", "gauge",
     "Consumers of the store cached by this instance's workers."},
    {"sluice_consumer_store_damaged_total", "counter",
     "Consumer store entries that are not what Sluice writes (another writer), each treated as "
     "an unknown key."},
};

}  // namespace

std::span<const MetricFamily> rate_limit_metric_families() {
  return kFamilies;
}

std::string_view refusal_reason_name(KeyRefusal::Reason reason) {
  switch (reason) {
    case KeyRefusal::Reason::kDuplicateIdentity:
      return "duplicate_identity";
    case KeyRefusal::Reason::kMalformedAuthorization:
      return "malformed_authorization";
  }
  return "unknown";
}

std::string_view fail_counter(FailureMode mode) {
  switch (mode) {
    case FailureMode::kOpen:
      return "sluice_ratelimit_fail_open_total";
    case FailureMode::kClosed:
      return "sluice_ratelimit_fail_closed_total";
    case FailureMode::kLocal:
      return "sluice_ratelimit_fail_local_total";
  }
  return "sluice_ratelimit_fail_closed_total";
}

void seed_rate_limit_metrics(const Config& config, MetricsShard& metrics) {
  metrics.declare_histogram("sluice_ratelimit_check_duration_seconds", "");
  for (const auto kind : redis::kErrorKinds) {
    metrics.declare("sluice_redis_errors_total", scratch_labels({{"kind", kind}}));
  }
  for (const auto kind : {"moved", "ask"}) {
    metrics.declare("sluice_redis_redirects_total", scratch_labels({{"kind", kind}}));
  }
  for (const auto result : {"ok", "error"}) {
    metrics.declare("sluice_redis_topology_refresh_total", scratch_labels({{"result", result}}));
    metrics.declare("sluice_ratelimit_refunds_total", scratch_labels({{"result", result}}));
  }
  for (const auto& limit : config.limits) {
    if (limit.lease_tokens > 0) {
      metrics.declare("sluice_ratelimit_leases_total", scratch_labels({{"limit", limit.name}}));
    }
    if (limit.algorithm == LimitAlgorithm::kConcurrency) {
      metrics.declare("sluice_ratelimit_in_flight", scratch_labels({{"limit", limit.name}}));
    }
  }
  for (const auto& route : config.routes) {
    if (!route.cost_from_response.enabled()) continue;
    for (const auto result : {"refund", "debit", "even", "failed"}) {
      metrics.declare("sluice_ratelimit_settlements_total",
                      scratch_labels({{"route", route.name}, {"result", result}}));
    }
    for (const auto direction : {"refund", "debit"}) {
      metrics.declare("sluice_ratelimit_settled_units_total",
                      scratch_labels({{"route", route.name}, {"direction", direction}}));
    }
    if (!route.cost_from_response.body) continue;
    for (const auto result : {"found", "missing", "invalid", "truncated", "unreadable"}) {
      metrics.declare("sluice_ratelimit_body_usage_total",
                      scratch_labels({{"route", route.name}, {"result", result}}));
    }
  }
  for (const auto& route : config.routes) {
    if (!route_limits(route)) continue;
    metrics.declare(fail_counter(route.on_redis_failure), scratch_labels({{"route", route.name}}));
    for (const auto exemption : {Exemption::kCidr, Exemption::kPlan}) {
      const bool listed = exemption == Exemption::kCidr ? !config.exemptions.client_cidrs.empty()
                                                        : !config.exemptions.plans.empty();
      if (!listed) continue;
      metrics.declare(
          "sluice_ratelimit_exempt_total",
          scratch_labels({{"route", route.name}, {"reason", exemption_reason(exemption)}}));
    }
    // A key source (or the cost header) a client could repeat (see descriptors.hpp).
    bool keys_on_identity = !route.cost_header.empty();
    bool keys_on_api_key = false;
    std::vector<KeySource::Kind> missing;  // sources that may be absent, in first-seen order
    const bool leases =
        std::any_of(route.limit_indexes.begin(), route.limit_indexes.end(),
                    [&config](std::size_t index) { return config.limits[index].lease_tokens > 0; });
    if (config.local.deny_cache) {
      metrics.declare("sluice_ratelimit_local_decisions_total",
                      scratch_labels({{"route", route.name}, {"kind", "deny_cache"}}));
    }
    if (leases) {
      metrics.declare("sluice_ratelimit_local_decisions_total",
                      scratch_labels({{"route", route.name}, {"kind", "lease"}}));
    }
    const bool delays = route.on_limit == RouteConfig::OnLimit::kDelay;
    if (delays) {
      metrics.declare_histogram("sluice_ratelimit_delay_seconds",
                                scratch_labels({{"route", route.name}}));
      metrics.declare("sluice_ratelimit_delay_abandoned_total",
                      scratch_labels({{"route", route.name}}));
    }
    for (const auto index : route.limit_indexes) {
      const LimitConfig& limit = config.limits[index];
      if (!limit.shadow) {
        metrics.declare("sluice_ratelimit_near_limit_total",
                        scratch_labels({{"route", route.name}, {"limit", limit.name}}));
      }
      // A shadow limit is never limited nor delayed; only an enforced one on a delay route waits.
      std::vector<LimitVerdict> verdicts = {LimitVerdict::kAllowed};
      if (limit.shadow) {
        verdicts.push_back(LimitVerdict::kShadowLimited);
      } else {
        verdicts.push_back(LimitVerdict::kLimited);
        if (delays) verdicts.push_back(LimitVerdict::kDelayed);
      }
      for (const auto verdict : verdicts) {
        metrics.declare("sluice_ratelimit_decisions_total",
                        scratch_labels({{"route", route.name},
                                        {"limit", limit.name},
                                        {"decision", verdict_label(verdict)}}));
      }
      if (!limit.plans.empty()) keys_on_identity = keys_on_api_key = true;
      for (const auto& source : limit.key) {
        const auto kind = source.kind;
        if (kind != KeySource::Kind::kApiKey && kind != KeySource::Kind::kHeader &&
            kind != KeySource::Kind::kQuery && kind != KeySource::Kind::kJwt &&
            kind != KeySource::Kind::kCert && kind != KeySource::Kind::kOrg &&
            kind != KeySource::Kind::kBody) {
          continue;
        }
        keys_on_identity = true;
        keys_on_api_key = keys_on_api_key || kind == KeySource::Kind::kApiKey;
        if (std::find(missing.begin(), missing.end(), kind) == missing.end()) {
          missing.push_back(kind);
        }
      }
    }
    for (const auto kind : missing) {
      metrics.declare("sluice_ratelimit_missing_key_total",
                      scratch_labels({{"route", route.name}, {"source", key_source_name(kind)}}));
    }
    if (keys_on_identity) {
      metrics.declare(
          "sluice_ratelimit_rejected_total",
          scratch_labels(
              {{"route", route.name},
               {"reason", refusal_reason_name(KeyRefusal::Reason::kDuplicateIdentity)}}));
    }
    if (keys_on_api_key && reads_bearer_credential(config.api_keys)) {
      metrics.declare(
          "sluice_ratelimit_rejected_total",
          scratch_labels(
              {{"route", route.name},
               {"reason", refusal_reason_name(KeyRefusal::Reason::kMalformedAuthorization)}}));
    }
  }
}

}  // namespace sluice
