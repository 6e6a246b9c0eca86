#include "gateway/config/keys.hpp"

namespace sluice {
namespace config {
namespace {

constexpr std::string_view kRoot[] = {"server",   "admin",  "log",    "redis",      "local", "upstreams",
                                      "api_keys", "limits", "routes", "exemptions", "plans",
                                      "audit",    "ip_access", "auth",   "tracing", "rls"};
constexpr std::string_view kRls[] = {"listen",           "tls",          "config_files",
                                     "domains",          "on_redis_failure",
                                     "response_headers", "max_descriptors",
                                     "max_connections"};
constexpr std::string_view kRlsTls[] = {"cert_file", "key_file"};
constexpr std::string_view kRlsDomain[] = {"domain", "descriptors"};
constexpr std::string_view kRlsDescriptor[] = {
    "key",         "value",           "rate_limit",      "shadow_mode", "quota_mode",
    "descriptors", "detailed_metric", "value_to_metric", "share_threshold", "metadata",
    "api_key"};
constexpr std::string_view kRlsRateLimit[] = {"unit",      "requests_per_unit", "unlimited",
                                              "name",      "replaces",          "limit"};
constexpr std::string_view kRlsReplaces[] = {"name"};
constexpr std::string_view kTracing[] = {
    "endpoint", "sampling_ratio",  "parent_based",      "service_name", "resource_attributes",
    "headers",  "max_queue_spans", "max_batch_spans", "flush_interval_ms", "timeout_ms", "tls"};
constexpr std::string_view kServer[] = {"listen",
                                        "threads",
                                        "max_header_bytes",
                                        "max_body_bytes",
                                        "header_timeout_ms",
                                        "idle_timeout_ms",
                                        "drain_timeout_ms",
                                        "body_timeout_ms",
                                        "send_timeout_ms",
                                        "max_connections",
                                        "headers_with_underscores",
                                        "trusted_proxies",
                                        "tls",
                                        "http2"};
constexpr std::string_view kHttp2[] = {"enabled", "max_concurrent_streams",
                                       "max_read_ahead_bytes"};
constexpr std::string_view kTls[] = {"listen",          "cert_file",
                                     "key_file",        "min_version",
                                     "certificates",    "session_timeout_ms",
                                     "ticket_key_rotation_ms", "ciphers",
                                     "ciphersuites",    "client_auth",
                                     "client_ca_file",  "client_consumer",
                                     "forward_client_cert"};
constexpr std::string_view kTlsCertificate[] = {"cert_file", "key_file"};
constexpr std::string_view kAdmin[] = {"listen", "token_file", "hosts"};
constexpr std::string_view kLog[] = {"level", "access_log", "access_log_flush_ms", "trace_sampled"};
constexpr std::string_view kAudit[] = {"redis_stream", "max_len"};
constexpr std::string_view kRedis[] = {
    "url",         "timeout_ms",      "connect_timeout_ms", "key_prefix",        "circuit_breaker",
    "tls_ca_file", "tls_cert_file",   "tls_key_file",       "tls_server_name",   "topology",
    "nodes",       "sentinel_master", "sentinel_username",  "sentinel_password", "key_secret_file"};
constexpr std::string_view kCircuitBreaker[] = {"failures", "open_ms"};
constexpr std::string_view kUpstream[] = {
    "servers",         "connect_timeout_ms", "response_timeout_ms", "max_idle_connections",
    "max_connections", "fail_cooldown_ms",   "health_check",        "tls",
    "protocol",        "balance",            "hash_on",             "outlier_detection",
    "retry_budget"};
constexpr std::string_view kRetryBudget[] = {"percent", "min_concurrent"};
constexpr std::string_view kOutlier[] = {"consecutive_5xx", "consecutive_gateway_errors",
                                         "base_ejection_ms", "max_ejection_ms",
                                         "max_ejection_percent"};
constexpr std::string_view kUpstreamServer[] = {"address", "weight"};
constexpr std::string_view kUpstreamTls[] = {"ca_file", "server_name", "certificate_file",
                                             "key_file", "min_version"};
constexpr std::string_view kHealthCheck[] = {
    "path",           "interval_ms", "timeout_ms", "healthy_threshold", "unhealthy_threshold",
    "expected_status"};
constexpr std::string_view kApiKeys[] = {"header",           "consumers",
                                         "default_plan",     "store",
                                         "cache_ttl_ms",     "unknown_cache_ttl_ms",
                                         "cache_max_entries", "unknown_key",
                                         "forward_consumer"};
constexpr std::string_view kConsumer[] = {"key", "plan", "id", "org"};
constexpr std::string_view kLocal[] = {"deny_cache", "fleet_size", "max_fleet_size",
                                       "max_buckets"};
constexpr std::string_view kLimit[] = {"key",       "capacity",     "refill_per_second",
                                       "plans",     "lease_tokens", "algorithm",
                                       "window_ms", "shadow",       "ipv6_prefix",
                                       "period",    "timezone",     "lease_ms",
                                       "client_headers", "models"};
constexpr std::string_view kPlan[] = {"capacity", "refill_per_second", "window_ms"};
constexpr std::string_view kModel[] = {"capacity", "refill_per_second", "window_ms", "plans"};
constexpr std::string_view kRoute[] = {"name",
                                       "match",
                                       "upstream",
                                       "strip_prefix",
                                       "ignore_client_abort",
                                       "limits",
                                       "cost",
                                       "on_redis_failure",
                                       "on_limit",
                                       "max_delay_ms",
                                       "cost_header",
                                       "max_cost",
                                       "cost_from_response",
                                       "max_inspect_bytes",
                                       "reject",
                                       "request_headers",
                                       "response_headers",
                                       "ip_access",
                                       "cors",
                                       "client_headers",
                                       "auth",
                                       "upstreams",
                                       "split_on",
                                       "timeout_ms",
                                       "idle_timeout_ms",
                                       "retry",
                                       "mirror"};
constexpr std::string_view kMirror[] = {"upstream", "percent", "max_in_flight",
                                        "max_body_bytes"};
constexpr std::string_view kRouteUpstream[] = {"name", "weight"};
constexpr std::string_view kRetry[] = {"attempts",           "on",
                                       "per_try_timeout_ms", "backoff",
                                       "retry_non_idempotent", "max_replay_bytes"};
constexpr std::string_view kRetryBackoff[] = {"base_ms", "max_ms"};
constexpr std::string_view kValueMatch[] = {"name",    "exact",  "prefix", "regex",
                                            "present", "absent", "invert"};
constexpr std::string_view kReject[] = {"status", "body", "content_type"};
constexpr std::string_view kRouteCost[] = {"from_body", "default", "add_prompt_estimate",
                                           "bytes_per_token"};
constexpr std::string_view kCostFromResponse[] = {"header", "body", "max_inspect_bytes", "statuses",
                                                   "max_debt"};
constexpr std::string_view kHeaderRules[] = {"set", "remove"};
constexpr std::string_view kIpAccess[] = {"allow", "deny", "allow_file", "deny_file"};
constexpr std::string_view kCors[] = {"allow_origins",  "allow_methods",     "allow_headers",
                                      "expose_headers", "allow_credentials", "max_age"};
constexpr std::string_view kAuth[] = {"jwt"};
constexpr std::string_view kJwt[] = {"providers", "from", "max_token_bytes", "cache_max_entries"};
constexpr std::string_view kJwtProvider[] = {
    "name",       "issuer",           "audiences",          "jwks_file",      "secret_file",
    "algorithms", "clock_skew_seconds", "consumer_claim", "plan_claim",     "forward_claims",
    "org_claim",  "jwks_url",         "jwks_ca_file",   "jwks_refresh_ms", "jwks_timeout_ms",
    "jwks_min_refresh_ms"};
constexpr std::string_view kExemptions[] = {"client_cidrs", "plans"};
constexpr std::string_view kMatch[] = {"path_prefix", "path_exact", "path_regex", "methods",
                                       "host",        "headers",    "query",      "cookies"};

}  // namespace

constexpr MappingKeys kRootKeys{"", kRoot};
constexpr MappingKeys kServerKeys{"server", kServer};
constexpr MappingKeys kTlsKeys{"server.tls", kTls};
constexpr MappingKeys kHttp2Keys{"server.http2", kHttp2};
constexpr MappingKeys kTlsCertificateKeys{"server.tls.certificates[]", kTlsCertificate};
constexpr MappingKeys kAdminKeys{"admin", kAdmin};
constexpr MappingKeys kLogKeys{"log", kLog};
constexpr MappingKeys kAuditKeys{"audit", kAudit};
constexpr MappingKeys kTracingKeys{"tracing", kTracing};
constexpr MappingKeys kTracingTlsKeys{"tracing.tls", kUpstreamTls};
constexpr MappingKeys kRlsKeys{"rls", kRls};
constexpr MappingKeys kRlsTlsKeys{"rls.tls", kRlsTls};
constexpr MappingKeys kRlsDomainKeys{"rls.domains[]", kRlsDomain};
constexpr MappingKeys kRlsDescriptorKeys{"rls.domains[].descriptors[]", kRlsDescriptor};
constexpr MappingKeys kRlsRateLimitKeys{"rls.domains[].descriptors[].rate_limit",
                                        kRlsRateLimit};
constexpr MappingKeys kRlsReplacesKeys{"rls.domains[].descriptors[].rate_limit.replaces[]",
                                       kRlsReplaces};
constexpr MappingKeys kRedisKeys{"redis", kRedis};
constexpr MappingKeys kCircuitBreakerKeys{"redis.circuit_breaker", kCircuitBreaker};
constexpr MappingKeys kLocalKeys{"local", kLocal};
constexpr MappingKeys kUpstreamKeys{"upstreams.NAME", kUpstream};
constexpr MappingKeys kUpstreamServerKeys{"upstreams.NAME.servers[]", kUpstreamServer};
constexpr MappingKeys kHealthCheckKeys{"upstreams.NAME.health_check", kHealthCheck};
constexpr MappingKeys kOutlierKeys{"upstreams.NAME.outlier_detection", kOutlier};
constexpr MappingKeys kUpstreamTlsKeys{"upstreams.NAME.tls", kUpstreamTls};
constexpr MappingKeys kApiKeysKeys{"api_keys", kApiKeys};
constexpr MappingKeys kConsumerKeys{"api_keys.consumers[]", kConsumer};
constexpr MappingKeys kLimitKeys{"limits.NAME", kLimit};
constexpr MappingKeys kPlanKeys{"limits.NAME.plans.PLAN", kPlan};
constexpr MappingKeys kModelKeys{"limits.NAME.models.MODEL", kModel};
constexpr MappingKeys kModelPlanKeys{"limits.NAME.models.MODEL.plans.PLAN", kPlan};
constexpr MappingKeys kRouteKeys{"routes[]", kRoute};
constexpr MappingKeys kMatchKeys{"routes[].match", kMatch};
constexpr MappingKeys kHeaderMatchKeys{"routes[].match.headers[]", kValueMatch};
constexpr MappingKeys kQueryMatchKeys{"routes[].match.query[]", kValueMatch};
constexpr MappingKeys kCookieMatchKeys{"routes[].match.cookies[]", kValueMatch};
constexpr MappingKeys kRouteUpstreamKeys{"routes[].upstreams[]", kRouteUpstream};
constexpr MappingKeys kRetryKeys{"routes[].retry", kRetry};
constexpr MappingKeys kMirrorKeys{"routes[].mirror", kMirror};
constexpr MappingKeys kRetryBackoffKeys{"routes[].retry.backoff", kRetryBackoff};
constexpr MappingKeys kRetryBudgetKeys{"upstreams.NAME.retry_budget", kRetryBudget};
constexpr MappingKeys kRejectKeys{"routes[].reject", kReject};
constexpr MappingKeys kCostFromResponseKeys{"routes[].cost_from_response", kCostFromResponse};
constexpr MappingKeys kRouteCostKeys{"routes[].cost", kRouteCost};
constexpr MappingKeys kRequestHeadersKeys{"routes[].request_headers", kHeaderRules};
constexpr MappingKeys kResponseHeadersKeys{"routes[].response_headers", kHeaderRules};
constexpr MappingKeys kExemptionsKeys{"exemptions", kExemptions};
constexpr MappingKeys kIpAccessKeys{"ip_access", kIpAccess};
constexpr MappingKeys kRouteIpAccessKeys{"routes[].ip_access", kIpAccess};
constexpr MappingKeys kCorsKeys{"routes[].cors", kCors};
constexpr MappingKeys kAuthKeys{"auth", kAuth};
constexpr MappingKeys kJwtKeys{"auth.jwt", kJwt};
constexpr MappingKeys kJwtProviderKeys{"auth.jwt.providers[]", kJwtProvider};

}  // namespace config

std::vector<std::string> config_key_paths() {
  using namespace config;
  const MappingKeys* const all[] = {
      &kRootKeys, &kServerKeys, &kTlsKeys, &kTlsCertificateKeys, &kAdminKeys, &kLogKeys, &kAuditKeys,
      &kTracingKeys, &kTracingTlsKeys, &kRlsKeys, &kRlsTlsKeys, &kRlsDomainKeys,
      &kRlsDescriptorKeys, &kRlsRateLimitKeys, &kRlsReplacesKeys,
      &kRedisKeys, &kLocalKeys, &kCircuitBreakerKeys, &kUpstreamKeys, &kUpstreamServerKeys, &kHealthCheckKeys, &kOutlierKeys, &kUpstreamTlsKeys,
      &kApiKeysKeys, &kConsumerKeys, &kLimitKeys, &kPlanKeys, &kModelKeys, &kModelPlanKeys, &kRouteKeys, &kMatchKeys, &kHeaderMatchKeys, &kQueryMatchKeys, &kCookieMatchKeys,
      &kRouteUpstreamKeys, &kRetryKeys, &kRetryBackoffKeys, &kRetryBudgetKeys, &kMirrorKeys,
      &kRejectKeys, &kCostFromResponseKeys, &kRouteCostKeys, &kRequestHeadersKeys, &kResponseHeadersKeys, &kExemptionsKeys,
      &kIpAccessKeys, &kRouteIpAccessKeys, &kCorsKeys, &kAuthKeys, &kJwtKeys,
      &kJwtProviderKeys};
  std::vector<std::string> out;
  for (const MappingKeys* mapping : all) {
    for (const auto key : mapping->keys) {
      out.push_back(mapping->path.empty() ? std::string(key)
                                          : std::string(mapping->path) + "." + std::string(key));
    }
  }
  return out;
}

}  // namespace sluice
