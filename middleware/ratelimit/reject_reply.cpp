#include "middleware/ratelimit/reject_reply.hpp"

#include "middleware/ratelimit/headers.hpp"

namespace sluice {

LocalReply limited_reply(const RejectReply& reject, std::span<const LimitDescriptor> limits,
                         const RateDecision& decision) {
  LocalReply reply;
  reply.status = reject.status;
  if (reject.body.empty()) {
    reply.content_type = std::string{kProblemJsonContentType};
    reply.body = too_many_requests_body(limits, decision, reject.status);
  } else {
    reply.content_type = reject.content_type;
    reply.body = reject.body;
    reply.verbatim = true;
  }
  return reply;
}

}  // namespace sluice
