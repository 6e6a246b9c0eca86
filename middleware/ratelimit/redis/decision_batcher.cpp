#include "middleware/ratelimit/redis/decision_batcher.hpp"

#include <optional>

#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "middleware/ratelimit/redis/script_reply.hpp"

namespace sluice {

bool DecisionBatcher::batchable(const LimitDescriptor& bucket) {
  return !bucket.shadow && algorithm_row(bucket).batches;
}

bool DecisionBatcher::enqueue(QueuedDecision decision) {
  queued_.push_back(std::move(decision));
  if (posted_) return false;
  posted_ = true;
  return true;
}

std::vector<QueuedDecision> DecisionBatcher::take() {
  posted_ = false;
  std::vector<QueuedDecision> batch;
  batch.swap(queued_);
  queued_.swap(spare_);
  return batch;
}

void DecisionBatcher::recycle(std::vector<QueuedDecision> spent) {
  spent.clear();
  if (spent.capacity() <= kKeptCapacity && spent.capacity() > spare_.capacity()) {
    spare_ = std::move(spent);
  }
}

void send_batch(redis::Client& client, const redis::Script& script, const LimitsCodec& codec,
                std::span<QueuedDecision> batch, std::shared_ptr<const void> owner,
                BatchOutcome outcome, std::shared_ptr<const redis::Client::LateReplyHandler> late) {
  if (batch.size() == 1) {  // alone: the call of one request
    QueuedDecision& one = batch.front();
    return client.evalsha_late(
        script, {std::move(one.key)}, codec.encode_args({&one.bucket, 1}, one.cost),
        [owner = std::move(owner), &codec, outcome = std::move(outcome),
         handler = std::move(one.handler)](std::error_code ec, redis::Reply reply) {
          std::optional<RateDecision> decision;
          if (!ec) {
            decision = decode_script_reply(codec, reply, 1);
            if (!decision) ec = make_error_code(LimiterError::kBadReply);
          }
          outcome(ec, decision ? std::move(*decision) : RateDecision{}, handler);
        },
        std::move(late));
  }
  std::vector<std::string> keys;
  std::vector<BatchRequest> requests;
  std::vector<RateDecisionHandler> handlers;
  keys.reserve(batch.size());
  requests.reserve(batch.size());
  handlers.reserve(batch.size());
  for (QueuedDecision& queued : batch) {
    keys.push_back(std::move(queued.key));
    requests.push_back(BatchRequest{&queued.bucket, queued.cost});
    handlers.push_back(std::move(queued.handler));
  }
  client.evalsha_late(
      script, std::move(keys), codec.encode_batch_args(requests),
      [owner = std::move(owner), &codec, outcome = std::move(outcome),
       handlers = std::move(handlers)](std::error_code ec, redis::Reply reply) {
        // Every request gets its own outcome; an error is each one's.
        std::optional<std::vector<RateDecision>> decisions;
        if (!ec) {
          decisions = decode_batch_reply(codec, reply, handlers.size());
          if (!decisions) ec = make_error_code(LimiterError::kBadReply);
        }
        for (std::size_t i = 0; i < handlers.size(); ++i) {
          if (decisions) {
            outcome(ec, std::move((*decisions)[i]), handlers[i]);
          } else {
            outcome(ec, RateDecision{}, handlers[i]);
          }
        }
      },
      std::move(late));
}

}  // namespace sluice
