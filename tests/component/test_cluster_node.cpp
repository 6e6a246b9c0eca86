// The cluster pieces against a real cluster-enabled redis-server: the key slot
// of random binary keys, and the slot map read from CLUSTER SHARDS and SLOTS.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "support/redis_server_fixture.hpp"
#include "upstream/redis/cluster/slot.hpp"
#include "upstream/redis/cluster/slot_map.hpp"
#include "upstream/redis/reply.hpp"

TEST_CASE("cluster slot: CLUSTER KEYSLOT of a real server agrees on random binary keys",
          "[redis]") {
  sluice::test::RedisServerOptions options;
  options.extra_args = {"--cluster-enabled", "yes"};
  options.cluster_bus = true;
  sluice::test::RedisServerFixture redis(options);

  std::mt19937 rng(20261122);
  const std::string alphabet("{}{}ab\x00\xff:z", 10);
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> commands;
  for (int i = 0; i < 500; ++i) {
    std::string key;
    const auto length = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int j = 0; j < length; ++j) {
      key += alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
    }
    keys.push_back(key);
    commands.push_back({"CLUSTER", "KEYSLOT", key});
  }
  const auto replies = redis.commands(commands);
  REQUIRE(replies.size() == keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    INFO("key #" << i);
    CHECK(replies[i] == "(integer) " + std::to_string(sluice::redis::cluster::key_slot(keys[i])));
  }
}

namespace {

// One command's reply, decoded by the client's own reader.
sluice::redis::Reply ask(std::uint16_t port, const std::string& inline_command) {
  const int fd = sluice::test::connect_loopback(port, std::chrono::milliseconds(2000));
  REQUIRE(fd >= 0);
  const std::string line = inline_command + "\r\n";
  REQUIRE(::send(fd, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size()));
  sluice::redis::ReplyReader reader;
  sluice::redis::Reply reply;
  char buf[4096];
  for (int reads = 0; reads < 1000; ++reads) {
    if (reader.next(reply) == sluice::redis::ReplyReader::Result::kReply) break;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    REQUIRE(n > 0);
    reader.feed(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return reply;
}

}  // namespace

TEST_CASE("slot map: a real node's CLUSTER SHARDS and CLUSTER SLOTS give the same map",
          "[redis]") {
  sluice::test::RedisServerOptions options;
  options.extra_args = {"--cluster-enabled", "yes"};
  options.cluster_bus = true;
  sluice::test::RedisServerFixture redis(options);
  using sluice::redis::cluster::NodeAddress;
  using sluice::redis::cluster::SlotMap;

  std::string error;
  // No slot assigned yet: a map with no owner at all.
  auto empty = SlotMap::from_shards(ask(redis.port(), "CLUSTER SHARDS"), "127.0.0.1", false, error);
  REQUIRE(empty);
  CHECK(empty->unowned_slots() == 16384);

  REQUIRE(redis.command({"CLUSTER", "ADDSLOTSRANGE", "0", "9999"}) == "OK");
  auto shards = SlotMap::from_shards(ask(redis.port(), "CLUSTER SHARDS"), "127.0.0.1", false, error);
  auto slots = SlotMap::from_slots(ask(redis.port(), "CLUSTER SLOTS"), "127.0.0.1", error);
  REQUIRE(shards);
  REQUIRE(slots);
  const NodeAddress self{"127.0.0.1", redis.port()};
  for (const unsigned slot : {0u, 5000u, 9999u}) {
    REQUIRE(shards->owner(slot));
    CHECK(*shards->owner(slot) == self);
    REQUIRE(slots->owner(slot));
    CHECK(*slots->owner(slot) == self);
  }
  CHECK(shards->unowned_slots() == 16384 - 10000);
  CHECK(slots->unowned_slots() == 16384 - 10000);
}

TEST_CASE("slot map: a node without cluster mode is refused with its own error", "[redis]") {
  sluice::test::RedisServerFixture redis;
  std::string error;
  CHECK_FALSE(sluice::redis::cluster::SlotMap::from_shards(ask(redis.port(), "CLUSTER SHARDS"),
                                                           "127.0.0.1", false, error));
  CHECK(error == "CLUSTER SHARDS failed: ERR This instance has cluster support disabled");
}
