// ClusterClient while a primary of a real Redis Cluster dies: the dead
// primary's slots fail at once (not by timeout) while the other slots keep
// deciding, and once its replica is promoted the slots work again. The
// killed node is started again afterwards and rejoins as a replica.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "support/cluster_client_driver.hpp"
#include "upstream/redis/cluster/slot.hpp"

using sluice::redis::Error;
using sluice::redis::State;
using sluice::redis::cluster::key_slot;
using sluice::test::ClusterDriver;
using sluice::test::ClusterFixture;
using Clock = std::chrono::steady_clock;

TEST_CASE("cluster client: a killed primary fails only its slots, until its replica takes over",
          "[cluster]") {
  auto& cluster = ClusterFixture::shared();
  // The seed list names every node, so a map is found whichever one dies.
  const auto ports = cluster.ports();
  ClusterDriver driver(ports.front(), {ports.begin() + 1, ports.end()});
  REQUIRE(driver.connect());

  // Two keys on different primaries.
  const std::string dying_key = "failover:a";
  const std::uint16_t victim = cluster.owner(key_slot(dying_key));
  std::string living_key;
  for (int i = 0; living_key.empty(); ++i) {
    const std::string key = "failover:b" + std::to_string(i);
    if (cluster.owner(key_slot(key)) != victim) living_key = key;
  }
  REQUIRE(cluster.replica_of(victim) != 0);
  REQUIRE(driver.call(driver.set_script, {dying_key}, {"1"}).first == std::error_code{});

  cluster.node(victim).stop();

  // Until the replica is promoted: the dead slots fail fast, the others serve.
  int failed_fast = 0;
  int living_ok = 0;
  bool recovered = false;
  const auto limit = Clock::now() + std::chrono::seconds(20);
  while (!recovered && Clock::now() < limit) {
    const auto started = Clock::now();
    const auto [ec, reply] = driver.call(driver.set_script, {dying_key}, {"2"});
    const auto took = Clock::now() - started;
    if (!ec) {
      recovered = true;
    } else {
      INFO(ec.message() << " " << reply.str);
      CHECK(ec != Error::kTimeout);
      CHECK(took < std::chrono::milliseconds(500));
      if (ec == Error::kNotConnected) ++failed_fast;
    }
    const auto living = driver.call(driver.set_script, {living_key}, {"x"});
    INFO(living.first.message() << " " << living.second.str);
    CHECK_FALSE(living.first);
    if (!living.first) ++living_ok;
    driver.loop.run_until([] { return false; }, std::chrono::milliseconds(20));
  }
  CHECK(recovered);
  CHECK(failed_fast > 0);
  CHECK(living_ok > 0);
  CHECK(driver.loop.run_until([&] { return driver.client->is_ready(); }));
  CHECK(driver.client->stats().topology_changes >= 2);
  for (const auto& node : driver.client->nodes())
    CHECK(node.address != "127.0.0.1:" + std::to_string(victim));

  // Restore: the old primary comes back as a replica.
  cluster.node(victim).start();
  CHECK(cluster.wait_ok(std::chrono::seconds(20)));
}
