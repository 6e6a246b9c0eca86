// What a limiter's decision means for one request, as pure functions: whether
// it goes at once, waits for its reserved tokens or is refused, what each of
// its limits is counted as, which limits the client is shown (shadow limits
// are a dry run and never are), and what a request that leaves while waiting
// gives back. No I/O, no clock.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

// How one limit is counted in sluice_ratelimit_decisions_total.
enum class LimitVerdict {
  kAllowed,        // the bucket had the tokens
  kLimited,        // an enforced bucket short of tokens, and the request refused
  kShadowLimited,  // a shadow bucket short of tokens, whatever the request's fate
  kDelayed,        // an enforced bucket short of tokens that reserved them: the request waits
};

std::string_view verdict_label(LimitVerdict verdict);

// The verdicts of a request's limits: inline for a route of up to 8 limits.
using LimitVerdicts = boost::container::small_vector<LimitVerdict, 8>;

struct RateOutcome {
  enum class Kind { kAllowed, kLimited, kDelayed };
  Kind kind = Kind::kAllowed;
  // kDelayed only: how long the request waits before it goes (> 0), never
  // more than the largest max_wait_seconds of its limits.
  double delay_seconds = 0;
  LimitVerdicts limits;  // parallel to the descriptors
};

// The outcome of `decision` for a request with these descriptors (parallel to
// decision.limits). Refused only when an enforced limit is short: a decision
// that names no enforced limit short of tokens lets the request go (nothing
// was debited then), since a shadow limit must never deny. Delayed when it
// was admitted with a positive delay_seconds or a positive wait_seconds on an
// enforced limit.
RateOutcome select_outcome(std::span<const LimitDescriptor> descriptors,
                           const RateDecision& decision);

// What the client is shown: the enforced limits and their states only (a
// decision refused for shadow limits alone shows as admitted). Not `filtered`
// when no limit is shadow: then show `descriptors` and `decision` as they are.
struct ClientView {
  bool filtered = false;
  std::vector<LimitDescriptor> limits;
  RateDecision decision;
};
ClientView client_view(std::span<const LimitDescriptor> descriptors, const RateDecision& decision);

// What an admitted request debited, to give back when it does not go after
// all: `cost` for every enforced bucket, and for each shadow bucket that had
// the tokens (a short shadow bucket was not debited).
std::vector<BucketRefund> debited_buckets(std::span<const LimitDescriptor> descriptors,
                                          const RateDecision& decision, double cost);

}  // namespace sluice
