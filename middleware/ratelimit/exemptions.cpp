#include "middleware/ratelimit/exemptions.hpp"

#include <algorithm>

#include "middleware/ratelimit/api_key.hpp"

namespace sluice {

std::string_view exemption_reason(Exemption exemption) {
  switch (exemption) {
    case Exemption::kCidr:
      return "cidr";
    case Exemption::kPlan:
      return "plan";
    case Exemption::kNone:
      break;
  }
  return "none";
}

Exemption find_exemption(const ExemptionsConfig& exemptions, const RequestView& request,
                         const ApiKeysConfig& api_keys) {
  if (is_trusted(request.client_ip, exemptions.client_cidrs)) return Exemption::kCidr;
  if (exemptions.plans.empty() || count_header(request, api_keys.header) != 1) {
    return Exemption::kNone;
  }
  const ApiKey key = extract_api_key(request, api_keys);
  if (!key.key) return Exemption::kNone;
  const bool listed = std::find(exemptions.plans.begin(), exemptions.plans.end(), key.plan) !=
                      exemptions.plans.end();
  return listed ? Exemption::kPlan : Exemption::kNone;
}

}  // namespace sluice
