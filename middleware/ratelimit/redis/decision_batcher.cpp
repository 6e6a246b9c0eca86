#include "middleware/ratelimit/redis/decision_batcher.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include "common/spares.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "middleware/ratelimit/redis/script_reply.hpp"
#include "upstream/redis/cluster/redirect.hpp"
#include "upstream/redis/cluster/slot.hpp"

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
    std::vector<std::string> keys = Spares<std::vector<std::string>>::take();
    keys.push_back(std::move(one.key));
    return client.evalsha_late(
        script, std::move(keys), codec.encode_args({&one.bucket, 1}, one.cost),
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
  // The lists come from the thread's spares and go back to them: the keys and
  // arguments with the client's record of the call, the rest here.
  std::vector<std::string> keys = Spares<std::vector<std::string>>::take();
  std::vector<BatchRequest> requests = Spares<std::vector<BatchRequest>>::take();
  std::vector<RateDecisionHandler> handlers = Spares<std::vector<RateDecisionHandler>>::take();
  keys.reserve(batch.size());
  requests.reserve(batch.size());
  handlers.reserve(batch.size());
  for (QueuedDecision& queued : batch) {
    keys.push_back(std::move(queued.key));
    requests.push_back(BatchRequest{&queued.bucket, queued.cost});
    handlers.push_back(std::move(queued.handler));
  }
  std::vector<std::string> args = codec.encode_batch_args(requests);
  keep_spare(std::move(requests));
  client.evalsha_late(
      script, std::move(keys), std::move(args),
      [owner = std::move(owner), &codec, outcome = std::move(outcome),
       handlers = std::move(handlers)](std::error_code ec, redis::Reply reply) mutable {
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
        if (decisions) keep_spare(std::move(*decisions));
        keep_spare(std::move(handlers));
      },
      std::move(late));
}

namespace {

// One node batch: the requests of `batch` at `indexes` (two or more, whose
// slots one primary owns), the first one's key routing the call.
void send_node_batch(redis::Client& client, const redis::Script& script, const LimitsCodec& codec,
                     std::span<QueuedDecision> batch, std::span<const std::size_t> indexes,
                     std::shared_ptr<const void> owner, BatchOutcome outcome,
                     std::function<void(QueuedDecision)> alone,
                     std::shared_ptr<const redis::Client::LateReplyHandler> late) {
  std::vector<std::string> keys;
  std::vector<BatchRequest> requests;
  keys.reserve(indexes.size());
  requests.reserve(indexes.size());
  for (const std::size_t i : indexes) {
    keys.push_back(batch[i].key);
    requests.push_back(BatchRequest{&batch[i].bucket, batch[i].cost});
  }
  std::vector<std::string> args = codec.encode_node_batch_args(requests, keys);
  std::vector<QueuedDecision> kept;
  kept.reserve(indexes.size());
  for (const std::size_t i : indexes) kept.push_back(std::move(batch[i]));
  // Never run after ASKING (where every key of a slot being imported would
  // count as the node's): a redirect of the whole call sends each request
  // on its own instead, which follows it.
  client.evalsha_unredirected(
      script, {std::move(keys.front())}, std::move(args),
      [owner = std::move(owner), &codec, outcome = std::move(outcome), alone = std::move(alone),
       kept = std::move(kept)](std::error_code ec, redis::Reply reply) mutable {
        const auto redirect = ec ? redis::cluster::parse_redirect(reply.str) : std::nullopt;
        if (redirect && (redirect->kind == redis::cluster::Redirect::Kind::kMoved ||
                         redirect->kind == redis::cluster::Redirect::Kind::kAsk)) {
          for (QueuedDecision& queued : kept) alone(std::move(queued));
          return;
        }
        std::optional<std::vector<std::optional<RateDecision>>> decisions;
        if (!ec) {
          decisions = decode_node_batch_reply(codec, reply, kept.size());
          if (!decisions) ec = make_error_code(LimiterError::kBadReply);
        }
        for (std::size_t i = 0; i < kept.size(); ++i) {
          if (!decisions) {
            outcome(ec, RateDecision{}, kept[i].handler);
          } else if ((*decisions)[i]) {
            outcome(ec, std::move(*(*decisions)[i]), kept[i].handler);
          } else {
            alone(std::move(kept[i]));
          }
        }
      },
      std::move(late));
}

}  // namespace

void send_node_batches(redis::Client& client, const redis::Script& script,
                       const LimitsCodec& codec, std::span<QueuedDecision> batch,
                       std::shared_ptr<const void> owner, BatchOutcome outcome,
                       std::function<void(QueuedDecision)> alone,
                       std::shared_ptr<const redis::Client::LateReplyHandler> late) {
  // The requests' indexes per owning primary, in their order.
  std::vector<std::pair<std::size_t, std::vector<std::size_t>>> nodes;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::optional<std::size_t> node =
        client.slot_owner(redis::cluster::key_slot(batch[i].key));
    if (!node) {  // the client fails it, or finds its owner
      send_batch(client, script, codec, batch.subspan(i, 1), owner, outcome, late);
      continue;
    }
    const auto known = std::find_if(nodes.begin(), nodes.end(),
                                     [&](const auto& entry) { return entry.first == *node; });
    if (known == nodes.end()) {
      nodes.push_back({*node, {i}});
    } else {
      known->second.push_back(i);
    }
  }
  constexpr std::size_t kMax = DecisionBatcher::kMaxBatch;
  for (const auto& [node, indexes] : nodes) {
    for (std::size_t first = 0; first < indexes.size(); first += kMax) {
      const auto part =
          std::span<const std::size_t>(indexes).subspan(first, std::min(kMax, indexes.size() - first));
      if (part.size() == 1) {
        send_batch(client, script, codec, batch.subspan(part[0], 1), owner, outcome, late);
      } else {
        send_node_batch(client, script, codec, batch, part, owner, outcome, alone, late);
      }
    }
  }
}

}  // namespace sluice
