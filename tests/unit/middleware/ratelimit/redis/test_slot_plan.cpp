// Splitting a cluster decision by slot and combining the parts: never admit
// what any part denied, refund exactly the parts that debited.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"
#include "middleware/ratelimit/redis/slot_plan.hpp"
#include "upstream/redis/cluster/slot.hpp"

namespace {

using namespace sluice;

RateDecision part(bool allowed, sluice::LimitStates limits) {
  RateDecision d;
  d.allowed = allowed;
  d.limits = std::move(limits);
  return d;
}

// Three buckets: two limits keyed by "alice" (one slot) and a global one.
struct ThreeBuckets {
  std::vector<LimitDescriptor> descriptors{{"per_key", key_hash("alice"), 10, 1},
                                           {"global", key_hash("everyone"), 100, 10},
                                           {"per_key_burst", key_hash("alice"), 5, 5}};
  std::vector<std::string> keys = redis_keys("s:", descriptors, KeyStyle::kHashTag);
  std::vector<SlotGroup> groups = group_by_slot(keys);
};

}  // namespace

TEST_CASE("slot plan: keys are grouped per slot in first-seen order", "[ratelimit][cluster]") {
  ThreeBuckets b;
  REQUIRE(redis::cluster::key_slot(b.keys[0]) != redis::cluster::key_slot(b.keys[1]));
  REQUIRE(b.groups.size() == 2);
  CHECK(b.groups[0].slot == redis::cluster::key_slot(b.keys[0]));
  CHECK(b.groups[0].indexes == std::vector<std::size_t>{0, 2});
  CHECK(b.groups[1].indexes == std::vector<std::size_t>{1});
  CHECK_FALSE(common_slot(b.keys));
  const std::vector<std::string> same{b.keys[0], b.keys[2]};
  CHECK(common_slot(same) == redis::cluster::key_slot(b.keys[0]));
  CHECK_FALSE(common_slot(std::vector<std::string>{}));
}

TEST_CASE("slot plan: every part allows: allowed, states in descriptor order, no refund",
          "[ratelimit][cluster]") {
  ThreeBuckets b;
  const std::vector<PartOutcome> parts{
      {{}, part(true, {{true, 9, 0, 1}, {true, 4, 0, 0.2}})},
      {{}, part(true, {{true, 99, 0, 0.1}})},
  };
  const auto c = combine_parts(b.groups, parts, b.descriptors, 1);
  CHECK_FALSE(c.error);
  CHECK(c.decision.allowed);
  CHECK(c.refunds.empty());
  REQUIRE(c.decision.limits.size() == 3);
  CHECK(c.decision.limits[0].remaining == 9);
  CHECK(c.decision.limits[1].remaining == 99);
  CHECK(c.decision.limits[2].remaining == 4);
}

TEST_CASE("slot plan: one part denies: denied, and the part that debited is refunded",
          "[ratelimit][cluster]") {
  ThreeBuckets b;
  const std::vector<PartOutcome> parts{
      {{}, part(true, {{true, 9, 0, 1}, {true, 4.5, 0, 0.1}})},
      {{}, part(false, {{false, 0.25, 0.075, 9.975}})},
  };
  const auto c = combine_parts(b.groups, parts, b.descriptors, 1);
  CHECK_FALSE(c.error);
  CHECK_FALSE(c.decision.allowed);
  CHECK(c.refunds == std::vector<std::size_t>{0});
  // The refunded buckets are reported as they are once the refund lands.
  CHECK(c.decision.limits[0].remaining == 10);
  CHECK(c.decision.limits[0].seconds_to_full == 0);
  CHECK(c.decision.limits[2].remaining == 5);  // capped at capacity
  CHECK(c.decision.limits[0].sufficient);
  CHECK_FALSE(c.decision.limits[1].sufficient);
  CHECK(c.decision.limits[1].seconds_to_cost == Approx(0.075));
}

TEST_CASE("slot plan: a part fails: no admission, the debits made are refunded",
          "[ratelimit][cluster]") {
  ThreeBuckets b;
  const auto timeout = std::make_error_code(std::errc::timed_out);
  SECTION("failure and allowance: the request fails (the route's failure mode decides)") {
    const std::vector<PartOutcome> parts{
        {{}, part(true, {{true, 9, 0, 1}, {true, 4, 0, 0.2}})},
        {timeout, {}},
    };
    const auto c = combine_parts(b.groups, parts, b.descriptors, 1);
    CHECK(c.error == timeout);
    CHECK(c.refunds == std::vector<std::size_t>{0});
  }
  SECTION("failure and denial: denied, since a limit said no") {
    const std::vector<PartOutcome> parts{
        {timeout, {}},
        {{}, part(false, {{false, 0, 0.1, 10}})},
    };
    const auto c = combine_parts(b.groups, parts, b.descriptors, 1);
    CHECK_FALSE(c.error);
    CHECK_FALSE(c.decision.allowed);
    CHECK(c.refunds.empty());
    // The failed part's buckets are never named as the one that denied.
    CHECK(c.decision.limits[0].sufficient);
    CHECK(c.decision.limits[2].sufficient);
    CHECK_FALSE(c.decision.limits[1].sufficient);
  }
  SECTION("every part fails: the first failure, nothing to refund") {
    const std::vector<PartOutcome> parts{{timeout, {}}, {timeout, {}}};
    const auto c = combine_parts(b.groups, parts, b.descriptors, 1);
    CHECK(c.error == timeout);
    CHECK(c.refunds.empty());
  }
}

TEST_CASE(
    "slot plan: shadow and reserved buckets: the verdict ignores shadow, refunds follow debits",
    "[ratelimit][cluster][policies]") {
  ThreeBuckets b;
  b.descriptors[2].shadow = true;         // per_key_burst: shadow, in the first part
  b.descriptors[0].max_wait_seconds = 2;  // per_key: may be reserved
  SECTION("a reserved and a short shadow bucket admit; the longest wait is the delay") {
    std::vector<PartOutcome> parts{
        {{}, part(true, {{false, -0.5, 1.5, 10.5, 0, 1.5}, {false, 0.5, 0.1, 0.9}})},
        {{}, part(true, {{true, 99, 0, 0.1}})},
    };
    parts[0].decision.delay_seconds = 1.5;
    const auto c = combine_parts(b.groups, parts, b.descriptors, 1);
    CHECK(c.decision.allowed);
    CHECK(c.decision.delay_seconds == 1.5);
    CHECK(c.refunds.empty());
  }
  SECTION("a denial elsewhere refunds the reserved bucket, not the short shadow one") {
    const std::vector<PartOutcome> parts{
        {{}, part(true, {{false, -0.5, 1.5, 10.5, 0, 1.5}, {false, 0.5, 0.1, 0.9}})},
        {{}, part(false, {{false, 0.25, 0.075, 9.975}})},
    };
    const auto c = combine_parts(b.groups, parts, b.descriptors, 1);
    CHECK_FALSE(c.decision.allowed);
    CHECK(c.decision.delay_seconds == 0);
    REQUIRE(c.refunds == std::vector<std::size_t>{0});
    const auto refunds = part_refunds(b.groups[0], parts[0], b.descriptors, 1);
    REQUIRE(refunds.size() == 1);
    CHECK(refunds[0].bucket.limit == "per_key");
    CHECK(refunds[0].tokens == 1);
    CHECK(c.decision.limits[0].remaining == 0.5);
    CHECK(c.decision.limits[0].wait_seconds == 0);
    // What it lacked before the reservation, not the longer wait after it.
    CHECK(c.decision.limits[0].seconds_to_cost == 1.5);
    CHECK(c.decision.limits[2].remaining == 0.5);  // not debited, reported as it was
  }
  SECTION("a shadow bucket that was debited is refunded too") {
    const std::vector<PartOutcome> parts{
        {{}, part(true, {{true, 3, 0, 7}, {true, 2, 0, 0.6}})},
        {{}, part(false, {{false, 0.25, 0.075, 9.975}})},
    };
    const auto refunds = part_refunds(b.groups[0], parts[0], b.descriptors, 1);
    REQUIRE(refunds.size() == 2);
    CHECK(refunds[1].bucket.limit == "per_key_burst");
  }
}
