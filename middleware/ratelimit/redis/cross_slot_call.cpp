#include "middleware/ratelimit/redis/cross_slot_call.hpp"

#include "common/spares.hpp"
#include "middleware/ratelimit/redis/script_reply.hpp"
#include "middleware/ratelimit/redis/slot_plan.hpp"

namespace sluice {
namespace {

// The state of one decision while its parts are out.
struct CrossSlotCall {
  CrossSlotCall(CrossSlotContext c, std::span<const LimitDescriptor> d, double cost_,
                RateDecisionHandler done_)
      : context(std::move(c)),
        descriptors(d.begin(), d.end()),
        cost(cost_),
        done(std::move(done_)) {}

  CrossSlotContext context;
  std::vector<LimitDescriptor> descriptors;
  double cost;
  RateDecisionHandler done;
  std::vector<SlotGroup> groups;
  // Per group: its keys (kept for a refund) and what it answered.
  std::vector<std::vector<std::string>> keys;
  std::vector<PartOutcome> parts;
  std::size_t waiting = 0;
};

void send_refunds(const std::shared_ptr<CrossSlotCall>& call,
                  const std::vector<std::size_t>& groups) {
  for (const std::size_t g : groups) {
    send_refund(call->context, call->keys[g],
                part_refunds(call->groups[g], call->parts[g], call->descriptors, call->cost),
                [call](std::error_code ec) {
                  if (call->context.on_refund) call->context.on_refund(ec);
                });
  }
}

void on_part(const std::shared_ptr<CrossSlotCall>& call, std::size_t g, std::error_code ec,
             const redis::Reply& reply) {
  PartOutcome& part = call->parts[g];
  if (ec) {
    part.error = ec;
  } else if (auto decision =
                 decode_script_reply(call->context.codec, reply, call->groups[g].indexes.size())) {
    part.decision = std::move(*decision);
  } else {
    part.error = redis::make_error_code(redis::Error::kProtocol);
  }
  if (--call->waiting != 0) return;
  CombinedDecision combined =
      combine_parts(call->groups, call->parts, call->descriptors, call->cost);
  send_refunds(call, combined.refunds);
  auto done = std::move(call->done);
  done(combined.error, std::move(combined.decision));
}

}  // namespace

void decide_across_slots(CrossSlotContext context, std::span<const LimitDescriptor> descriptors,
                         std::vector<std::string> keys, double cost, RateDecisionHandler done) {
  auto call =
      std::make_shared<CrossSlotCall>(std::move(context), descriptors, cost, std::move(done));
  call->groups = group_by_slot(keys);
  const std::size_t n = call->groups.size();
  call->keys.resize(n);
  call->parts.resize(n);
  call->waiting = n;
  std::vector<LimitDescriptor> subset;
  for (std::size_t g = 0; g < n; ++g) {
    subset.clear();
    for (const std::size_t i : call->groups[g].indexes) {
      call->keys[g].push_back(std::move(keys[i]));
      subset.push_back(call->descriptors[i]);
    }
    call->context.client.evalsha_late(
        call->context.decide_script, call->keys[g], call->context.codec.encode_args(subset, cost),
        [call, g](std::error_code ec, redis::Reply reply) { on_part(call, g, ec, reply); },
        call->context.late);
  }
}

void send_refund(const CrossSlotContext& context, std::vector<std::string> keys,
                 std::vector<BucketRefund> refunds, RefundHandler done) {
  context.client.evalsha(
      context.refund_script, std::move(keys), context.codec.encode_refund_args(refunds),
      [owner = context.owner, done = std::move(done)](std::error_code ec, redis::Reply reply) {
        if (!ec && reply.type != redis::Reply::Type::kInteger) {
          ec = redis::make_error_code(redis::Error::kProtocol);
        }
        if (done) done(ec);
      });
  keep_spare(std::move(refunds));  // encoded
}

}  // namespace sluice
