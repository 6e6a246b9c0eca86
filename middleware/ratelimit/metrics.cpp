#include "middleware/ratelimit/metrics.hpp"

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
     "Requests whose key source was missing and fell back to the client IP."},
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

}  // namespace sluice
