#include <catch2/catch.hpp>

#include <string>

#include "upstream/redis/cluster/slot_map.hpp"

using sluice::redis::Reply;
using sluice::redis::cluster::NodeAddress;
using sluice::redis::cluster::SlotMap;

namespace {

Reply text(std::string s) { return Reply{Reply::Type::kString, std::move(s), 0, {}}; }
Reply number(long long n) { return Reply{Reply::Type::kInteger, {}, n, {}}; }
Reply array(std::vector<Reply> elements) {
  return Reply{Reply::Type::kArray, {}, 0, std::move(elements)};
}
Reply nil() { return Reply{}; }

Reply slots_range(long long first, long long last, Reply host, long long port) {
  return array({number(first), number(last), array({std::move(host), number(port), text("id")}),
                array({text("10.0.0.9"), number(7009), text("replica")})});
}

Reply shard_node(std::string role, std::string endpoint, long long port, std::string health,
                 long long tls_port = 0) {
  std::vector<Reply> fields = {text("id"),       text("abc"),        text("port"),
                               number(port),     text("ip"),         text("10.9.9.9"),
                               text("endpoint"), text(endpoint),     text("role"),
                               text(role),       text("health"),     text(health)};
  if (tls_port) {
    fields.push_back(text("tls-port"));
    fields.push_back(number(tls_port));
  }
  return array(std::move(fields));
}

Reply shard(std::vector<long long> ranges, std::vector<Reply> nodes) {
  std::vector<Reply> slots;
  for (long long n : ranges) slots.push_back(number(n));
  return array({text("slots"), array(std::move(slots)), text("nodes"), array(std::move(nodes))});
}

}  // namespace

TEST_CASE("slot map: CLUSTER SLOTS ranges, primaries and the unknown endpoints") {
  const Reply reply = array({
      slots_range(0, 5460, text("10.0.0.1"), 7000),
      slots_range(5461, 10922, text(""), 7001),  // empty: the node asked
      slots_range(10923, 16000, text("?"), 7002),  // unknown endpoint: no owner
      slots_range(16001, 16383, nil(), 7003),      // nil endpoint: no owner
  });
  std::string error;
  const auto map = SlotMap::from_slots(reply, "seed.local", error);
  REQUIRE(map);
  CHECK(error.empty());
  CHECK(*map->owner(0) == NodeAddress{"10.0.0.1", 7000});
  CHECK(*map->owner(5460) == NodeAddress{"10.0.0.1", 7000});
  CHECK(*map->owner(5461) == NodeAddress{"seed.local", 7001});
  CHECK(map->owner(10923) == nullptr);
  CHECK(map->owner(16383) == nullptr);
  CHECK(map->unowned_slots() == 16384 - 10923);
  CHECK(map->primaries() ==
        std::vector<NodeAddress>{{"10.0.0.1", 7000}, {"seed.local", 7001}});
}

TEST_CASE("slot map: CLUSTER SHARDS picks the online primary, tls-port on request") {
  const Reply reply = array({
      shard({0, 100, 200, 300},
            {shard_node("replica", "10.0.0.4", 7004, "online"),
             shard_node("master", "10.0.0.1", 7000, "online", 8000)}),
      shard({101, 199}, {shard_node("master", "10.0.0.2", 7001, "failed")}),
      shard({301, 16383}, {shard_node("master", "", 7002, "online")}),
  });
  std::string error;
  const auto plain = SlotMap::from_shards(reply, "seed", false, error);
  REQUIRE(plain);
  CHECK(*plain->owner(0) == NodeAddress{"10.0.0.1", 7000});
  CHECK(*plain->owner(250) == NodeAddress{"10.0.0.1", 7000});
  CHECK(plain->owner(150) == nullptr);  // its primary has failed
  CHECK(*plain->owner(301) == NodeAddress{"seed", 7002});
  CHECK(plain->unowned_slots() == 99);
  const auto tls = SlotMap::from_shards(reply, "seed", true, error);
  REQUIRE(tls);
  CHECK(*tls->owner(0) == NodeAddress{"10.0.0.1", 8000});
  CHECK(*tls->owner(301) == NodeAddress{"seed", 7002});  // no tls-port given
}

TEST_CASE("slot map: MOVED updates one slot; redirects to new addresses stay bounded") {
  std::string error;
  auto map = SlotMap::from_slots(array({slots_range(0, 16383, text("a"), 1)}), "s", error);
  REQUIRE(map);
  map->move(42, {"b", 2});
  CHECK(*map->owner(42) == NodeAddress{"b", 2});
  CHECK(*map->owner(41) == NodeAddress{"a", 1});
  for (int i = 0; i < 40000; ++i) map->move(7, {"n" + std::to_string(i), 3});
  CHECK(*map->owner(7) == NodeAddress{"n39999", 3});
  CHECK(map->primaries().size() == 3);
  CHECK(*map->owner(42) == NodeAddress{"b", 2});
}

TEST_CASE("slot map: errors, non-cluster nodes and garbage are refused with a reason") {
  std::string error;
  const Reply not_cluster{Reply::Type::kError, "ERR This instance has cluster support disabled", 0,
                          {}};
  CHECK_FALSE(SlotMap::from_shards(not_cluster, "s", false, error));
  CHECK(error == "CLUSTER SHARDS failed: ERR This instance has cluster support disabled");
  CHECK_FALSE(SlotMap::from_slots(not_cluster, "s", error));
  CHECK(error == "CLUSTER SLOTS failed: ERR This instance has cluster support disabled");
  for (const Reply& bad : {number(1), array({number(1)}),
                           array({slots_range(5, 4, text("a"), 1)}),
                           array({slots_range(0, 16384, text("a"), 1)}),
                           array({slots_range(0, 1, text("a"), 0)}),
                           array({slots_range(0, 1, text("a"), 70000)}),
                           array({array({number(0), number(1), array({text("a")})})})}) {
    error.clear();
    CHECK_FALSE(SlotMap::from_slots(bad, "s", error));
    CHECK(error == "CLUSTER SLOTS gave an unexpected reply");
  }
  for (const Reply& bad : {array({array({text("slots")})}),
                           array({shard({0}, {})}),
                           array({shard({3, 2}, {})}),
                           array({shard({0, 20000}, {})})}) {
    error.clear();
    CHECK_FALSE(SlotMap::from_shards(bad, "s", false, error));
    CHECK(error == "CLUSTER SHARDS gave an unexpected reply");
  }
}
