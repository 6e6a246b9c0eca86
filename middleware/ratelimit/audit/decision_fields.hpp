// What the access log and the denial audit say about a request's rate-limit
// decision, as pure functions: the decision's name, the limit that decided
// (the one that denied, else the most restrictive) with its remaining units,
// and who the caller is, never by a raw key. No I/O.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "gateway/middleware.hpp"
#include "middleware/ratelimit/outcome.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

struct Identity;

// Who the caller is in logs and audits: a store consumer's id; for any other
// key (a YAML consumer's, an unlisted one) its fingerprint under the key
// secret (consumer.hpp); empty when the request carries no key.
std::string caller_label(const Identity& identity, std::string_view key_secret);

// The limit that decided `decision`: on a denial the most restrictive of the
// enforced limits that were short; when admitted with a shadow limit short,
// that shadow limit; otherwise the most restrictive of all (headers.hpp).
// descriptors.size() when there is none.
std::size_t deciding_limit(std::span<const LimitDescriptor> descriptors,
                           const RateDecision& decision, const RateOutcome& outcome);

// Who a denial names in the most-limited view and the denial stream: the
// caller's label (caller_label) when it has one, else the deciding limit's
// bucket as 32 hex digits (its key hash: never a raw value).
std::string denied_caller(std::string_view label, const LimitDescriptor& limit);

// Fills `record` with a decision the limiter (or the local fallback, with
// `fallback` set) made: its name, the deciding limit, its remaining units
// and the cost.
void record_decision(DecisionRecord& record, std::span<const LimitDescriptor> descriptors,
                     const RateDecision& decision, const RateOutcome& outcome, double cost,
                     bool fallback);

}  // namespace sluice
