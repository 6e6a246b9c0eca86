// Batching of one-bucket decisions on one Redis: a request whose only limit is
// one enforced key of an algorithm that batches waits for the end of this turn
// of the worker's loop, and every such request of the turn is decided in one
// script call (at most kMaxBatch per call, since one call holds Redis for all
// of them). The script decides them in order, each as it would alone.
#pragma once

#include <cstddef>
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

// A one-bucket decision waiting for the end of this turn of the loop.
struct QueuedDecision {
  LimitDescriptor bucket;
  std::string key;
  double cost = 1;
  RateDecisionHandler handler;
};

// Each request's outcome of a batch call: its decision, or the call's error.
using BatchOutcome =
    std::function<void(std::error_code, RateDecision&&, const RateDecisionHandler&)>;

class DecisionBatcher {
 public:
  static constexpr std::size_t kMaxBatch = 64;

  // Whether a request of this one bucket may wait for a batch.
  static bool batchable(const LimitDescriptor& bucket);

  // Queues a decision; true when it is the first of this turn, and the
  // caller must post the flush.
  bool enqueue(QueuedDecision decision);

  // The decisions queued this turn; the next enqueue starts a new turn.
  std::vector<QueuedDecision> take();
  // A taken batch, once sent: its storage queues a later turn (kept only up
  // to kKeptCapacity decisions), so that a steady load queues without
  // allocating.
  void recycle(std::vector<QueuedDecision> spent);

  static constexpr std::size_t kKeptCapacity = 4 * kMaxBatch;

 private:
  std::vector<QueuedDecision> queued_;
  std::vector<QueuedDecision> spare_;
  bool posted_ = false;
};

// Sends `batch` (at most kMaxBatch decisions) as one script call: a batch
// call, or the call of one request when it is alone. `owner` is held until
// the reply, which goes to `outcome` for each request in order; `late` (may
// be null) gets the reply if it comes after the call timed out.
void send_batch(redis::Client& client, const redis::Script& script, const LimitsCodec& codec,
                std::span<QueuedDecision> batch, std::shared_ptr<const void> owner,
                BatchOutcome outcome,
                std::shared_ptr<const redis::Client::LateReplyHandler> late = nullptr);

// Sends a Redis Cluster's `batch` (keys named for the cluster) as node
// batches: the requests whose slots one primary owns, as the client's map
// has it, go in one call (at most kMaxBatch; a request alone goes as
// send_batch sends it, as does one whose slot has no owner in the map).
// Each request the node did not decide (its slot moved: nothing was written
// for it) goes to `alone`, and so does every request of a call redirected as
// a whole (MOVED, ASK: a node batch is sent with evalsha_unredirected, since
// after ASKING every key of a slot being imported counts as the node's); the
// others' outcomes as send_batch's. The requests are moved out of `batch`.
void send_node_batches(redis::Client& client, const redis::Script& script,
                       const LimitsCodec& codec, std::span<QueuedDecision> batch,
                       std::shared_ptr<const void> owner, BatchOutcome outcome,
                       std::function<void(QueuedDecision)> alone,
                       std::shared_ptr<const redis::Client::LateReplyHandler> late = nullptr);

}  // namespace sluice
