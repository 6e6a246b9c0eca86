// Which requests skip rate limiting altogether: a client address inside one
// of exemptions.client_cidrs, or an API key whose plan exemptions.plans
// lists. Pure functions, no I/O.
#pragma once

#include <string_view>

#include "gateway/config/config.hpp"
#include "middleware/ratelimit/identity.hpp"
#include "middleware/ratelimit/request_view.hpp"

namespace sluice {

enum class Exemption { kNone, kCidr, kPlan };

// The metric label of an exemption: "cidr" or "plan".
std::string_view exemption_reason(Exemption exemption);

// Why the request is exempt, if it is. The client address is checked first.
// A plan exempts only a request that carries one line of api_keys.header with
// a consumer's key, so a missing, repeated or malformed key never exempts;
// with no consumers, every key has the default plan and none is exempt.
Exemption find_exemption(const ExemptionsConfig& exemptions, const RequestView& request,
                         const Identity& identity);

}  // namespace sluice
