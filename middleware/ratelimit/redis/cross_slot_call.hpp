// One rate-limit decision on a Redis Cluster whose buckets span several hash
// slots: one token-bucket script call per slot, all sent at once (the client
// pipelines them per node), combined by combine_parts() once every part has
// answered; the parts that debited a request that is not admitted get the
// refund script at once. The refunds do not delay the answer and do not
// depend on whoever asked: they are sent even if the requester is gone.
// Runs on the client's executor; `done` is called there exactly once.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "middleware/ratelimit/algorithms/limits_codec.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"
#include "upstream/redis/client.hpp"

namespace sluice {

struct CrossSlotContext {
  redis::Client& client;
  const redis::Script& decide_script;
  const redis::Script& refund_script;
  const LimitsCodec& codec;
  // Keeps client, scripts and codec alive until the last refund has answered.
  std::shared_ptr<const void> owner;
  // Told each refund's outcome (may be empty).
  std::function<void(std::error_code)> on_refund;
  // Gets a decision call's answer that came after it timed out (may be null).
  std::shared_ptr<const redis::Client::LateReplyHandler> late;
};

// Decides `descriptors` (whose keys, in the same order, are `keys`).
void decide_across_slots(CrossSlotContext context, std::span<const LimitDescriptor> descriptors,
                         std::vector<std::string> keys, double cost, RateDecisionHandler done);

// One refund script call for buckets that share a slot (or any buckets on a
// single Redis); `done` (may be empty) gets its outcome.
void send_refund(const CrossSlotContext& context, std::vector<std::string> keys,
                 std::vector<BucketRefund> refunds, RefundHandler done);

}  // namespace sluice
