// The batcher's turns: the first decision of a turn asks for the flush, a taken
// turn starts the next, and a sent batch's storage queues a later turn.
#include <catch2/catch.hpp>

#include "middleware/ratelimit/redis/decision_batcher.hpp"

using sluice::DecisionBatcher;
using sluice::QueuedDecision;

namespace {

QueuedDecision queued(double cost) {
  QueuedDecision d;
  d.bucket.limit = "per_ip";
  d.key = "sluice:per_ip:0123";
  d.cost = cost;
  return d;
}

}  // namespace

TEST_CASE("decision batcher: turns, and storage kept across them", "[ratelimit][batch]") {
  DecisionBatcher batcher;
  CHECK(batcher.enqueue(queued(1)));  // the first of the turn: post the flush
  CHECK_FALSE(batcher.enqueue(queued(2)));
  CHECK_FALSE(batcher.enqueue(queued(3)));
  auto batch = batcher.take();
  REQUIRE(batch.size() == 3);
  CHECK(batch[2].cost == 3);
  const QueuedDecision* storage = batch.data();

  CHECK(batcher.enqueue(queued(4)));  // a new turn
  batcher.recycle(std::move(batch));
  auto second = batcher.take();
  REQUIRE(second.size() == 1);
  CHECK(second[0].cost == 4);
  batcher.recycle(std::move(second));

  // The third turn queues into the first batch's storage.
  CHECK(batcher.enqueue(queued(5)));
  auto third = batcher.take();
  REQUIRE(third.size() == 1);
  CHECK(third[0].cost == 5);
  CHECK(third.data() == storage);

  // A batch grown past the kept capacity is let go.
  std::vector<QueuedDecision> huge;
  huge.reserve(DecisionBatcher::kKeptCapacity + 1);
  batcher.recycle(std::move(huge));
  CHECK(batcher.enqueue(queued(6)));
  CHECK(batcher.take().capacity() <= DecisionBatcher::kKeptCapacity);
}
