// The keys each mapping of the configuration accepts. The section readers
// reject any other key with these tables, and config_key_paths() lists them
// so that the documentation can be checked against the parser.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

namespace config {

struct MappingKeys {
  std::string_view path;  // as documented: "upstreams.NAME", "routes[].match"
  std::span<const std::string_view> keys;
};

extern const MappingKeys kRootKeys;
extern const MappingKeys kServerKeys;
extern const MappingKeys kTlsKeys;
extern const MappingKeys kHttp2Keys;
extern const MappingKeys kTlsCertificateKeys;
extern const MappingKeys kAdminKeys;
extern const MappingKeys kLogKeys;
extern const MappingKeys kAuditKeys;
extern const MappingKeys kTracingKeys;
extern const MappingKeys kTracingTlsKeys;
extern const MappingKeys kRlsKeys;
extern const MappingKeys kRlsTlsKeys;
extern const MappingKeys kRlsDomainKeys;
extern const MappingKeys kRlsDescriptorKeys;
extern const MappingKeys kRlsRateLimitKeys;
extern const MappingKeys kRlsReplacesKeys;
extern const MappingKeys kRedisKeys;
extern const MappingKeys kLocalKeys;
extern const MappingKeys kCircuitBreakerKeys;
extern const MappingKeys kUpstreamKeys;
extern const MappingKeys kUpstreamServerKeys;
extern const MappingKeys kHealthCheckKeys;
extern const MappingKeys kOutlierKeys;
extern const MappingKeys kUpstreamTlsKeys;
extern const MappingKeys kApiKeysKeys;
extern const MappingKeys kConsumerKeys;
extern const MappingKeys kLimitKeys;
extern const MappingKeys kPlanKeys;
extern const MappingKeys kRouteKeys;
extern const MappingKeys kMatchKeys;
extern const MappingKeys kHeaderMatchKeys;
extern const MappingKeys kQueryMatchKeys;
extern const MappingKeys kCookieMatchKeys;
extern const MappingKeys kRouteUpstreamKeys;
extern const MappingKeys kRetryKeys;
extern const MappingKeys kMirrorKeys;
extern const MappingKeys kRetryBackoffKeys;
extern const MappingKeys kRetryBudgetKeys;
extern const MappingKeys kRejectKeys;
extern const MappingKeys kCostFromResponseKeys;
extern const MappingKeys kRouteCostKeys;
extern const MappingKeys kModelKeys;
extern const MappingKeys kModelPlanKeys;
extern const MappingKeys kRequestHeadersKeys;
extern const MappingKeys kResponseHeadersKeys;
extern const MappingKeys kExemptionsKeys;
extern const MappingKeys kIpAccessKeys;
extern const MappingKeys kRouteIpAccessKeys;
extern const MappingKeys kCorsKeys;
extern const MappingKeys kAuthKeys;
extern const MappingKeys kJwtKeys;
extern const MappingKeys kJwtProviderKeys;

}  // namespace config

// Every key the parser accepts, as a path: "server.listen", "upstreams.NAME.servers",
// "routes[].match.methods", "limits.NAME.plans.PLAN.capacity".
std::vector<std::string> config_key_paths();

}  // namespace sluice
