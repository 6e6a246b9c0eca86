// ClusterClient against a real Redis Cluster (3 primaries, 3 replicas):
// routing by slot, hash tags, MOVED, ASK and TRYAGAIN during a slot
// migration, NOSCRIPT
// on one node, and the seed list's bad cases (a plain redis-server, a dead
// seed, a node that answers garbage). The failover of a killed primary is in
// test_cluster_failover.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/cluster_client_driver.hpp"
#include "upstream/redis/cluster/slot.hpp"

using sluice::redis::Error;
using sluice::redis::State;
using sluice::redis::cluster::key_slot;
using sluice::test::ClusterDriver;
using sluice::test::ClusterFixture;

namespace {

// Keys k0, k1, ... until one in each of `count` different slots is found
// whose owner is `owner` (0: any).
std::string key_owned_by(ClusterFixture& cluster, std::uint16_t owner, int start = 0) {
  for (int i = start; i < 100000; ++i) {
    std::string key = "key:" + std::to_string(i);
    if (owner == 0 || cluster.owner(key_slot(key)) == owner) return key;
  }
  FAIL("no key found");
  return {};
}

// Starts moving `slot` from `from` to `to` (IMPORTING, MIGRATING) and moves
// `key` over (if not empty), as a resharding does halfway through.
void begin_migration(ClusterFixture& cluster, const std::string& slot, std::uint16_t from,
                     std::uint16_t to, const std::string& key) {
  REQUIRE(cluster.command(to, {"CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.id_of(from)}) ==
          "OK");
  REQUIRE(cluster.command(from, {"CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.id_of(to)}) ==
          "OK");
  if (key.empty()) return;
  REQUIRE(cluster.command(from, {"MIGRATE", "127.0.0.1", std::to_string(to), key, "0", "5000"}) ==
          "OK");
}

// Undoes begin_migration: `key` is deleted where it went, the slot stays with `from`.
void abandon_migration(ClusterFixture& cluster, const std::string& slot, std::uint16_t from,
                       std::uint16_t to, const std::string& key) {
  CHECK(sluice::test::sync_commands(to, {{"ASKING"}, {"DEL", key}}).back() == "(integer) 1");
  CHECK(cluster.command(to, {"CLUSTER", "SETSLOT", slot, "STABLE"}) == "OK");
  CHECK(cluster.command(from, {"CLUSTER", "SETSLOT", slot, "STABLE"}) == "OK");
}

// Moves `slot` with its keys from `from` to `to` (IMPORTING / MIGRATING,
// MIGRATE, SETSLOT NODE on every primary) and waits until every node agrees.
void migrate_slot(ClusterFixture& cluster, int slot, std::uint16_t from, std::uint16_t to) {
  const std::string s = std::to_string(slot);
  const std::string to_id = cluster.id_of(to);
  begin_migration(cluster, s, from, to, "");
  const std::string keys = cluster.command(from, {"CLUSTER", "GETKEYSINSLOT", s, "1000"});
  if (keys != "[]") {
    std::vector<std::string> migrate{"MIGRATE", "127.0.0.1", std::to_string(to), "", "0",
                                     "5000",    "KEYS"};
    std::string list = keys.substr(1, keys.size() - 2);
    for (std::size_t at = 0; at <= list.size();) {
      const auto comma = list.find(", ", at);
      migrate.push_back(list.substr(at, comma - at));
      if (comma == std::string::npos) break;
      at = comma + 2;
    }
    REQUIRE(cluster.command(from, migrate) == "OK");
  }
  REQUIRE(cluster.command(to, {"CLUSTER", "SETSLOT", s, "NODE", to_id}) == "OK");
  REQUIRE(cluster.command(from, {"CLUSTER", "SETSLOT", s, "NODE", to_id}) == "OK");
  for (const auto port : cluster.ports()) {
    if (port == from || port == to || !cluster.running(port)) continue;
    const auto view = cluster.view(port);
    const bool primary = std::any_of(view.begin(), view.end(),
                                     [&](const auto& n) { return n.port == port && n.primary; });
    if (primary) cluster.command(port, {"CLUSTER", "SETSLOT", s, "NODE", to_id});
  }
  // Every node, replicas included, names the new owner before the test goes on.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    bool agreed = true;
    for (const auto port : cluster.ports()) {
      for (const auto& node : cluster.view(port)) {
        for (const auto& [first, last] : node.slots) {
          if (slot >= first && slot <= last && node.port != to) agreed = false;
        }
      }
    }
    if (agreed) break;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::uint16_t other_primary(ClusterFixture& cluster, std::uint16_t not_this) {
  for (const auto& node : cluster.view(not_this)) {
    if (node.primary && !node.failed && !node.slots.empty() && node.port != not_this) {
      return node.port;
    }
  }
  FAIL("no other primary");
  return 0;
}

}  // namespace

TEST_CASE("cluster client: keys of many slots go to their owners; a hash tag keeps keys together",
          "[cluster]") {
  auto& cluster = ClusterFixture::shared();
  ClusterDriver driver(cluster.owner(0));
  REQUIRE(driver.connect());
  CHECK(driver.client->state() == State::kReady);

  const auto nodes = driver.client->nodes();
  REQUIRE(nodes.size() == 3);
  std::size_t slots = 0;
  for (const auto& node : nodes) {
    CHECK(node.role == "primary");
    CHECK(node.state == State::kReady);
    slots += node.slots;
  }
  CHECK(slots == 16384);

  std::vector<std::string> keys;
  for (int i = 0; i < 200; ++i) keys.push_back("route:" + std::to_string(i));
  for (const auto& key : keys) {
    const auto [ec, reply] = driver.call(driver.set_script, {key}, {"v-" + key});
    REQUIRE_FALSE(ec);
    CHECK(reply.str == "OK");
  }
  for (const auto& key : keys) {
    INFO(key);
    CHECK(cluster.command(cluster.owner(key_slot(key)), {"GET", key}) == "v-" + key);
  }
  CHECK(driver.client->stats().redirects_moved == 0);

  // Both keys in one call: only possible because they share the tag's slot.
  const auto [ec, reply] = driver.call(driver.set_two_script, {"{user42}.a", "{user42}.b"}, {"x"});
  REQUIRE_FALSE(ec);
  const auto owner = cluster.owner(key_slot("user42"));
  CHECK(cluster.command(owner, {"MGET", "{user42}.a", "{user42}.b"}) == "[x, x]");

  // A command without keys goes to any primary.
  const auto [ping_ec, pong] = driver.command({"PING"});
  REQUIRE_FALSE(ping_ec);
  CHECK(pong.str == "PONG");
}

TEST_CASE("cluster client: a migrated slot is followed (MOVED) and the map is updated",
          "[cluster]") {
  auto& cluster = ClusterFixture::shared();
  ClusterDriver driver(cluster.owner(0));
  REQUIRE(driver.connect());
  const std::string key = key_owned_by(cluster, 0, 777);
  const int slot = key_slot(key);
  REQUIRE(driver.call(driver.set_script, {key}, {"before"}).first == std::error_code{});
  const std::uint16_t from = cluster.owner(slot);
  const std::uint16_t to = other_primary(cluster, from);

  migrate_slot(cluster, slot, from, to);
  const auto moved_before = driver.client->stats().redirects_moved;
  const auto [ec, reply] = driver.call(driver.get_script, {key}, {});
  REQUIRE_FALSE(ec);
  CHECK(reply.str == "before");  // the bucket kept its state on the new owner
  CHECK(driver.client->stats().redirects_moved == moved_before + 1);
  // The next call goes straight to the new owner.
  REQUIRE(driver.call(driver.get_script, {key}, {}).first == std::error_code{});
  CHECK(driver.client->stats().redirects_moved == moved_before + 1);
  // The refresh that followed saw the change.
  CHECK(driver.loop.run_until([&] { return driver.client->stats().topology_changes >= 2; }));

  migrate_slot(cluster, slot, to, from);  // restore
}

TEST_CASE("cluster client: a slot being migrated is followed once with ASKING (ASK)", "[cluster]") {
  auto& cluster = ClusterFixture::shared();
  ClusterDriver driver(cluster.owner(0));
  REQUIRE(driver.connect());
  const std::string key = key_owned_by(cluster, 0, 4242);
  const std::string s = std::to_string(key_slot(key));
  const std::uint16_t from = cluster.owner(key_slot(key));
  const std::uint16_t to = other_primary(cluster, from);
  REQUIRE(cluster.command(from, {"SET", key, "old"}) == "OK");

  begin_migration(cluster, s, from, to, key);

  const auto [ec, reply] = driver.call(driver.set_script, {key}, {"new"});
  REQUIRE_FALSE(ec);
  CHECK(reply.str == "OK");
  CHECK(driver.client->stats().redirects_ask == 1);
  CHECK(driver.client->stats().redirects_moved == 0);
  CHECK(sluice::test::sync_commands(to, {{"ASKING"}, {"GET", key}}).back() == "new");

  // Restore: the key goes, the slot is stable on its old owner again.
  abandon_migration(cluster, s, from, to, key);
}

TEST_CASE("cluster client: TRYAGAIN is sent again after a pause, a bounded number of times",
          "[cluster]") {
  auto& cluster = ClusterFixture::shared();
  ClusterDriver driver(cluster.owner(0));
  REQUIRE(driver.connect());
  const std::string a = "{split}.a";
  const std::string b = "{split}.b";
  const std::string s = std::to_string(key_slot(a));
  const std::uint16_t from = cluster.owner(key_slot(a));
  const std::uint16_t to = other_primary(cluster, from);
  REQUIRE(cluster.command(from, {"MSET", a, "1", b, "1"}) == "OK");
  begin_migration(cluster, s, from, to, a);

  // One key moved, one not: the old owner answers TRYAGAIN for as long as
  // the migration lasts; the client tries again, then passes the reply on.
  const auto started = std::chrono::steady_clock::now();
  const auto [ec, reply] = driver.call(driver.set_two_script, {a, b}, {"2"});
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(ec == Error::kServer);
  CHECK(reply.str.starts_with("TRYAGAIN"));
  CHECK(took >= std::chrono::milliseconds(60));  // five pauses of 15 ms
  CHECK(took < std::chrono::milliseconds(1000));
  CHECK(driver.client->stats().redirects_ask == 0);

  CHECK(cluster.command(from, {"DEL", b}) == "(integer) 1");
  abandon_migration(cluster, s, from, to, a);
}

TEST_CASE("cluster client: a node that lost its scripts still runs them (NOSCRIPT per node)",
          "[cluster]") {
  auto& cluster = ClusterFixture::shared();
  ClusterDriver driver(cluster.owner(0));
  REQUIRE(driver.connect());
  const std::string key = key_owned_by(cluster, 0, 31337);
  REQUIRE(driver.call(driver.set_script, {key}, {"1"}).first == std::error_code{});
  REQUIRE(cluster.command(cluster.owner(key_slot(key)), {"SCRIPT", "FLUSH"}) == "OK");
  const auto retries = driver.client->stats().noscript_retries;
  const auto [ec, reply] = driver.call(driver.set_script, {key}, {"2"});
  REQUIRE_FALSE(ec);
  CHECK(reply.str == "OK");
  CHECK(driver.client->stats().noscript_retries == retries + 1);
  CHECK(cluster.command(cluster.owner(key_slot(key)), {"GET", key}) == "2");
}

TEST_CASE("cluster client: a plain redis-server as the only seed is a clear error", "[cluster]") {
  sluice::test::RedisServerFixture plain;
  ClusterDriver driver(plain.port());
  CHECK_FALSE(driver.connect(std::chrono::milliseconds(3000)));
  CHECK(driver.client->state() != State::kReady);
  CHECK(driver.client->last_error() == Error::kConnect);
  const std::string message = driver.client->last_error_message();
  INFO(message);
  CHECK(message.starts_with(
      "no seed node gave a slot map: 127.0.0.1:" + std::to_string(plain.port()) + ": "));
  CHECK(message.find("cluster support disabled") != std::string::npos);
  // Commands fail at once; the map is asked for again with backoff.
  const auto [ec, reply] = driver.call(driver.set_script, {"k"}, {"v"});
  CHECK(ec == Error::kNotConnected);
  CHECK(driver.loop.run_until([&] { return driver.client->stats().topology_refresh_error >= 2; }));
  CHECK(driver.client->stats().topology_refresh_ok == 0);
  CHECK(driver.client->nodes().empty());
}

TEST_CASE("cluster client: a dead first seed is skipped for the next one", "[cluster]") {
  auto& cluster = ClusterFixture::shared();
  const std::uint16_t dead = sluice::test::pick_free_port();
  ClusterDriver driver(dead, {cluster.owner(0)});
  REQUIRE(driver.connect());
  CHECK(driver.call(driver.set_script, {"seed:k"}, {"v"}).first == std::error_code{});
  CHECK(driver.client->stats().topology_refresh_ok == 1);
}

namespace {

// A "node" that answers every connection with junk (and keeps it open, so
// that the junk is read rather than a reset).
class GarbageServer {
 public:
  explicit GarbageServer(boost::asio::io_context& io)
      : acceptor_(io, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    accept();
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int served = 0;

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, boost::asio::ip::tcp::socket s) {
      if (ec) return;
      ++served;
      sockets_.push_back(std::make_unique<boost::asio::ip::tcp::socket>(std::move(s)));
      boost::asio::async_write(*sockets_.back(), boost::asio::buffer(junk_),
                               [](boost::system::error_code, std::size_t) {});
      accept();
    });
  }
  boost::asio::ip::tcp::acceptor acceptor_;
  std::vector<std::unique_ptr<boost::asio::ip::tcp::socket>> sockets_;
  const std::string junk_ = "HTTP/1.1 400 Bad Request\r\n\r\n";
};

}  // namespace

TEST_CASE("cluster client: a node answering garbage is named and skipped", "[cluster]") {
  sluice::test::Loop loop;
  GarbageServer garbage(loop.io);
  {
    ClusterDriver alone(loop, garbage.port());
    CHECK_FALSE(alone.connect(std::chrono::milliseconds(3000)));
    const std::string message = alone.client->last_error_message();
    INFO(message);
    CHECK(message.find("127.0.0.1:" + std::to_string(garbage.port())) != std::string::npos);
    CHECK(message.find("malformed reply") != std::string::npos);
    CHECK(garbage.served >= 1);
  }
  auto& cluster = ClusterFixture::shared();
  ClusterDriver driver(loop, garbage.port(), {cluster.owner(0)});
  REQUIRE(driver.connect());
  CHECK(driver.call(driver.set_script, {"garbage:k"}, {"v"}).first == std::error_code{});
}
