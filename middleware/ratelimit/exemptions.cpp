#include "middleware/ratelimit/exemptions.hpp"

#include <algorithm>


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
                         const Identity& identity) {
  if (is_trusted(request.client_ip, exemptions.client_cidrs)) return Exemption::kCidr;
  // Only a consumer's key is exempt by plan (without consumers any key a
  // client makes up would have the default plan).
  if (exemptions.plans.empty() || !identity.consumer || identity.key_lines != 1) {
    return Exemption::kNone;
  }
  const bool listed = std::find(exemptions.plans.begin(), exemptions.plans.end(),
                                identity.plan) != exemptions.plans.end();
  return listed ? Exemption::kPlan : Exemption::kNone;
}

}  // namespace sluice
