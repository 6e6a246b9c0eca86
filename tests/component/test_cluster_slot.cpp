// The key slot Sluice computes against the one a real cluster-enabled
// redis-server computes, for random binary keys rich in braces.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "support/redis_server_fixture.hpp"
#include "upstream/redis/cluster/slot.hpp"

TEST_CASE("cluster slot: CLUSTER KEYSLOT of a real server agrees on random binary keys",
          "[redis]") {
  sluice::test::RedisServerOptions options;
  options.extra_args = {"--cluster-enabled", "yes"};
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
