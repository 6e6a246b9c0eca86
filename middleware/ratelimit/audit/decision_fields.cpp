#include "middleware/ratelimit/audit/decision_fields.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/hex.hpp"
#include "middleware/ratelimit/consumers/consumer.hpp"
#include "middleware/ratelimit/headers.hpp"
#include "middleware/ratelimit/identity.hpp"

namespace sluice {

std::string caller_label(const Identity& identity, std::string_view key_secret) {
  if (identity.stored && !identity.consumer_id.empty()) return std::string(identity.consumer_id);
  if (!identity.presented) return {};
  return key_fingerprint(*identity.presented, key_secret);
}

std::string denied_caller(std::string_view label, const LimitDescriptor& limit) {
  if (!label.empty()) return std::string(label);
  std::string out;
  out.reserve(2 * limit.key_hash.size());
  hex::append(out, limit.key_hash);
  return out;
}

std::size_t deciding_limit(std::span<const LimitDescriptor> descriptors,
                           const RateDecision& decision, const RateOutcome& outcome) {
  const std::size_t n = std::min(descriptors.size(), decision.limits.size());
  // The limits that compete: the short enforced ones on a denial, the short
  // shadow ones when a shadow limit alone was short, otherwise all.
  const auto short_of = [&](bool shadow) {
    const auto competes = [&](std::size_t i) {
      return !decision.limits[i].sufficient && descriptors[i].shadow == shadow;
    };
    // By reference: a std::function holds a reference without allocating.
    return most_restrictive_of(descriptors, decision, std::cref(competes));
  };
  if (outcome.kind == RateOutcome::Kind::kLimited) {
    const std::size_t denied = short_of(false);
    if (denied < n) return denied;
  }
  if (outcome.kind == RateOutcome::Kind::kAllowed) {
    const std::size_t shadow = short_of(true);
    if (shadow < n) return shadow;
  }
  return most_restrictive_limit(descriptors.first(n), decision);
}

void record_decision(DecisionRecord& record, std::span<const LimitDescriptor> descriptors,
                     const RateDecision& decision, const RateOutcome& outcome, double cost,
                     bool fallback) {
  const std::size_t chosen = deciding_limit(descriptors, decision, outcome);
  const bool shadow_short = outcome.kind == RateOutcome::Kind::kAllowed &&
                            chosen < descriptors.size() && descriptors[chosen].shadow &&
                            !decision.limits[chosen].sufficient;
  if (fallback) {
    record.decision = "fail_local";
  } else if (outcome.kind == RateOutcome::Kind::kLimited) {
    record.decision = "limited";
  } else if (outcome.kind == RateOutcome::Kind::kDelayed) {
    record.decision = "delayed";
  } else {
    record.decision = shadow_short ? "shadow_limited" : "allowed";
  }
  record.cost = cost;
  if (chosen < descriptors.size() && chosen < decision.limits.size()) {
    record.limit = descriptors[chosen].limit;
    record.remaining = std::floor(decision.limits[chosen].remaining);  // as the headers show it
  }
}

}  // namespace sluice
