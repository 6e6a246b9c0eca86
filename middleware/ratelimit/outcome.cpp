#include "middleware/ratelimit/outcome.hpp"

#include <algorithm>

namespace sluice {

std::string_view verdict_label(LimitVerdict verdict) {
  switch (verdict) {
    case LimitVerdict::kAllowed:
      return "allowed";
    case LimitVerdict::kLimited:
      return "limited";
    case LimitVerdict::kShadowLimited:
      return "shadow_limited";
    case LimitVerdict::kDelayed:
      return "delayed";
  }
  return "allowed";
}

RateOutcome select_outcome(std::span<const LimitDescriptor> descriptors,
                           const RateDecision& decision) {
  const std::size_t n = std::min(descriptors.size(), decision.limits.size());
  bool enforced_short = false;
  double wait = decision.delay_seconds;
  double bound = 0;  // the longest wait any enforced limit accepts
  for (std::size_t i = 0; i < n; ++i) {
    if (descriptors[i].shadow) continue;
    enforced_short = enforced_short || !decision.limits[i].sufficient;
    wait = std::max(wait, decision.limits[i].wait_seconds);
    bound = std::max(bound, descriptors[i].max_wait_seconds);
  }

  RateOutcome outcome;
  if (!decision.allowed && enforced_short) {
    outcome.kind = RateOutcome::Kind::kLimited;
  } else if (std::min(wait, bound) > 0) {
    outcome.kind = RateOutcome::Kind::kDelayed;
    outcome.delay_seconds = std::min(wait, bound);
  }
  const bool refused = outcome.kind == RateOutcome::Kind::kLimited;
  outcome.limits.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const LimitState& state = decision.limits[i];
    LimitVerdict verdict = LimitVerdict::kAllowed;
    if (descriptors[i].shadow) {
      if (!state.sufficient) verdict = LimitVerdict::kShadowLimited;
    } else if (!state.sufficient || state.wait_seconds > 0) {
      verdict = refused ? LimitVerdict::kLimited : LimitVerdict::kDelayed;
    }
    outcome.limits.push_back(verdict);
  }
  return outcome;
}

ClientView client_view(std::span<const LimitDescriptor> descriptors, const RateDecision& decision) {
  ClientView view;
  const std::size_t n = std::min(descriptors.size(), decision.limits.size());
  view.filtered = std::any_of(descriptors.begin(), descriptors.begin() + n,
                              [](const LimitDescriptor& d) { return d.shadow; });
  if (!view.filtered) return view;
  view.decision = decision;
  view.decision.limits.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (descriptors[i].shadow) continue;
    view.limits.push_back(descriptors[i]);
    view.decision.limits.push_back(decision.limits[i]);
  }
  // Refused for a shadow limit alone (which must not happen): shown as admitted.
  view.decision.allowed =
      decision.allowed || std::any_of(view.decision.limits.begin(), view.decision.limits.end(),
                                      [](const LimitState& s) { return !s.sufficient; }) == false;
  return view;
}

std::vector<BucketRefund> debited_buckets(std::span<const LimitDescriptor> descriptors,
                                          const RateDecision& decision, double cost) {
  std::vector<BucketRefund> refunds;
  const std::size_t n = std::min(descriptors.size(), decision.limits.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (descriptors[i].shadow && !decision.limits[i].sufficient) continue;
    refunds.push_back({descriptors[i], cost});
  }
  return refunds;
}

}  // namespace sluice
