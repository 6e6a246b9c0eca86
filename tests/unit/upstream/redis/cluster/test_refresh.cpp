#include <catch2/catch.hpp>

#include "support/script_replies.hpp"

#include "upstream/redis/cluster/refresh.hpp"

using sluice::redis::Reply;
using sluice::redis::cluster::describe_change;
using sluice::redis::cluster::NodeAddress;
using sluice::redis::cluster::refresh_candidates;
using sluice::redis::cluster::RefreshPacer;
using sluice::redis::cluster::SlotMap;
using sluice::test::array_reply;
using sluice::test::integer_reply;
using sluice::test::text_reply;
using namespace std::chrono_literals;

namespace {

// A CLUSTER SLOTS reply: each range [first, last] owned by 127.0.0.1:port.
SlotMap slots_map(std::vector<std::tuple<int, int, int>> ranges) {
  std::vector<Reply> out;
  for (const auto& [first, last, port] : ranges) {
    out.push_back(array_reply({integer_reply(first), integer_reply(last),
                               array_reply({text_reply("127.0.0.1"), integer_reply(port)})}));
  }
  std::string error;
  auto map = SlotMap::from_slots(array_reply(std::move(out)), "127.0.0.1", error);
  REQUIRE(map);
  return *map;
}

}  // namespace

TEST_CASE("cluster refresh pacer: the first wish starts at once, later ones keep the gap") {
  RefreshPacer pacer(100ms);
  const auto t0 = RefreshPacer::TimePoint{} + 1h;
  CHECK(pacer.due() == RefreshPacer::TimePoint::max());
  pacer.want(t0, "connect");
  CHECK(pacer.due() == t0);
  REQUIRE(pacer.can_start(t0));
  CHECK(std::string(pacer.start(t0)) == "connect");
  CHECK(pacer.in_flight());

  // Triggers while one is in flight coalesce into one, held back to the gap,
  // keeping the first reason.
  pacer.want(t0 + 10ms, "MOVED");
  pacer.want(t0 + 20ms, "a connection lost");
  CHECK(pacer.due() == t0 + 100ms);
  CHECK_FALSE(pacer.can_start(t0 + 150ms));  // still in flight
  pacer.finish();
  CHECK(pacer.can_start(t0 + 150ms));
  CHECK(std::string(pacer.start(t0 + 150ms)) == "MOVED");
  pacer.finish();
  CHECK(pacer.due() == RefreshPacer::TimePoint::max());
}

TEST_CASE("cluster refresh pacer: an earlier wish overrides a later periodic one") {
  RefreshPacer pacer(100ms);
  const auto t0 = RefreshPacer::TimePoint{} + 1h;
  pacer.start(t0);
  pacer.finish();
  pacer.want(t0 + 10s, "periodic refresh");
  CHECK(pacer.due() == t0 + 10s);
  pacer.want(t0 + 1s, "MOVED");
  CHECK(pacer.due() == t0 + 1s);
  pacer.want(t0 + 5s, "later");
  CHECK(pacer.due() == t0 + 1s);
  CHECK(std::string(pacer.start(t0 + 1s)) == "MOVED");
}

TEST_CASE("cluster refresh candidates: seeds in order, then the primaries, each once") {
  const std::vector<NodeAddress> seeds{{"127.0.0.1", 7000}, {"127.0.0.1", 7001}};
  const std::vector<NodeAddress> primaries{{"127.0.0.1", 7001}, {"127.0.0.1", 7004}};
  const auto out = refresh_candidates(seeds, primaries);
  REQUIRE(out.size() == 3);
  CHECK(out[0].port == 7000);
  CHECK(out[1].port == 7001);
  CHECK(out[2].port == 7004);

  // Nodes with a ready connection first, otherwise in the same order.
  const auto reused = refresh_candidates(
      seeds, primaries, [](const NodeAddress& a) { return a.port == 7004 || a.port == 7001; });
  REQUIRE(reused.size() == 3);
  CHECK(reused[0].port == 7001);
  CHECK(reused[1].port == 7004);
  CHECK(reused[2].port == 7000);
}

TEST_CASE("cluster map change: one line naming where slots went") {
  const SlotMap three = slots_map({{0, 5460, 7000}, {5461, 10922, 7001}, {10923, 16383, 7002}});
  CHECK(describe_change(three, three).empty());

  const SlotMap failed_over =
      slots_map({{0, 5460, 7000}, {5461, 10922, 7004}, {10923, 16383, 7002}});
  CHECK(describe_change(three, failed_over) == "5462 slots moved to 127.0.0.1:7004; 3 primaries");

  const SlotMap one_moved =
      slots_map({{0, 0, 7001}, {1, 5460, 7000}, {5461, 10922, 7001}, {10923, 16383, 7002}});
  CHECK(describe_change(three, one_moved) == "1 slot moved to 127.0.0.1:7001; 3 primaries");

  const SlotMap orphaned = slots_map({{0, 5460, 7000}, {10923, 16383, 7002}});
  CHECK(describe_change(three, orphaned) == "5462 slots without an owner; 2 primaries");

  CHECK(describe_change(SlotMap(), three) ==
        "5461 slots moved to 127.0.0.1:7000, 5462 slots moved to 127.0.0.1:7001, 5461 slots "
        "moved to 127.0.0.1:7002; 3 primaries");
}

TEST_CASE("cluster refresh pacer: unchanged answers widen the gap, a change narrows it",
          "[cluster]") {
  RefreshPacer pacer(100ms, 1000ms);
  auto t = RefreshPacer::TimePoint{} + 1h;
  const std::chrono::milliseconds expected[] = {200ms, 400ms, 800ms, 1000ms, 1000ms};
  for (const auto gap : expected) {
    pacer.want(t, "a slot without an owner");
    REQUIRE(pacer.can_start(pacer.due()));
    t = pacer.due();
    pacer.start(t);
    pacer.finish(false);  // the same map again
    CHECK(pacer.gap() == gap);
    pacer.want(t, "a slot without an owner");
    CHECK(pacer.due() == t + gap);
  }
  pacer.start(pacer.due());
  pacer.finish(true);  // the map changed
  CHECK(pacer.gap() == 100ms);
}
