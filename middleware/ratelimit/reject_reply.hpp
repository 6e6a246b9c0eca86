// The reply to a request its limits deny: the route's `reject` status, body
// and content type, or by default 429 with the problem+json document. The
// rate-limit headers (Retry-After among them) are added by the caller as for
// any decision. A pure function.
#pragma once

#include <span>

#include "gateway/config/config.hpp"
#include "gateway/middleware.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

// With reject.body empty the body is the problem+json document of
// too_many_requests_body, its "status" member set to reject.status.
LocalReply limited_reply(const RejectReply& reject, std::span<const LimitDescriptor> limits,
                         const RateDecision& decision);

}  // namespace sluice
