// Component tests of the Sentinel client against real processes: one
// primary, one replica and three redis-sentinel on 127.0.0.1 (see
// support/sentinel_fixture.hpp), plus the ROLE check of a single node that
// must be a primary. Each test runs its own io_context in bounded slices and
// polls for conditions.
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "support/io_loop.hpp"
#include "support/redis_server_fixture.hpp"
#include "support/sentinel_fixture.hpp"
#include "upstream/redis/sentinel/sentinel_client.hpp"
#include "upstream/redis/single_node_client.hpp"

namespace sentinel_client_test {

using namespace std::chrono_literals;
using sluice::redis::Error;
using sluice::redis::Options;
using sluice::redis::Reply;
using sluice::redis::Script;
using sluice::redis::SentinelClient;
using sluice::redis::SingleNodeClient;
using sluice::redis::State;
using sluice::test::Loop;
using sluice::test::SentinelFixture;
using Clock = std::chrono::steady_clock;

const Script kIncr("return redis.call('INCR', KEYS[1])");

// Sentinels at `ports`, in order: the first is options.host:port.
Options sentinel_options(const std::vector<std::uint16_t>& ports,
                         std::string master = sluice::test::kSentinelMaster) {
  Options o;
  o.topology = sluice::redis::Topology::kSentinel;
  o.host = "127.0.0.1";
  o.port = ports.front();
  for (std::size_t i = 1; i < ports.size(); ++i) o.nodes.push_back({"127.0.0.1", ports[i]});
  o.sentinel_master = std::move(master);
  o.command_timeout = 500ms;  // generous: the test machine is shared
  o.connect_timeout = 1000ms;
  o.backoff_max = 500ms;
  return o;
}

std::vector<std::uint16_t> sentinel_ports(SentinelFixture& f) {
  std::vector<std::uint16_t> ports;
  for (std::size_t i = 0; i < f.sentinel_count(); ++i) ports.push_back(f.sentinel(i).port());
  return ports;
}

std::string address(std::uint16_t port) {
  return "127.0.0.1:" + std::to_string(port);
}

std::error_code connect(Loop& loop, sluice::redis::Client& client) {
  std::optional<std::error_code> result;
  client.connect([&](std::error_code ec) { result = ec; });
  REQUIRE(loop.run_until([&] { return result.has_value(); }, 10s));
  return *result;
}

struct Outcome {
  std::error_code ec;
  Reply reply;
  Clock::duration elapsed{};
};

Outcome run_evalsha(Loop& loop, sluice::redis::Client& client, const std::string& key) {
  std::optional<Outcome> out;
  const auto start = Clock::now();
  client.evalsha(kIncr, {key}, {}, [&](std::error_code ec, Reply reply) {
    out = Outcome{ec, std::move(reply), Clock::now() - start};
  });
  REQUIRE(loop.run_until([&] { return out.has_value(); }));
  return *out;
}

// Sends one evalsha INCR every 10 ms and records how each completed; a
// command that takes longer than its deadline (plus scheduling slack) is a
// hang.
struct Load {
  Load(Loop& loop, sluice::redis::Client& client) : loop_(loop), client_(client), timer_(loop.io) {
    tick();
  }
  ~Load() { stopped_ = true; }

  void tick() {
    if (stopped_) return;
    const auto start = Clock::now();
    ++counts.sent;
    client_.evalsha(kIncr, {"load"}, {}, [this, start](std::error_code ec, Reply) {
      const auto elapsed = Clock::now() - start;
      longest = std::max(longest, elapsed);
      if (ec) {
        ++counts.failed;
        last_ok = false;
      } else {
        ++counts.succeeded;
        last_ok = true;
      }
    });
    timer_.expires_after(10ms);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) tick();
    });
  }

  // Runs until the client is connected to the primary at `port` and the
  // latest command succeeded.
  bool until_on(std::uint16_t port, std::chrono::milliseconds limit) {
    const std::string want = address(port);
    return loop_.run_until(
        [&] { return last_ok && client_.is_ready() && client_.nodes().front().address == want; },
        limit);
  }

  void stop() {
    stopped_ = true;
    timer_.cancel();
    loop_.run_until([&] { return counts.succeeded + counts.failed == counts.sent; }, 2s);
  }

  Loop& loop_;
  sluice::redis::Client& client_;
  boost::asio::steady_timer timer_;
  bool stopped_ = false;
  struct Counts {
    int sent = 0, succeeded = 0, failed = 0;
  } counts;
  bool last_ok = false;
  Clock::duration longest{};
};

// Connects through the sentinels of `f` and keeps a load running while
// provoke() starts a failover; checks that the client ends up deciding on the
// promoted replica within `limit` and that no command outlived its deadline.
template <class Provoke>
Load::Counts failover_under_load(SentinelFixture& f, std::chrono::milliseconds limit,
                                 Provoke provoke) {
  Loop loop;
  const Options options = sentinel_options(sentinel_ports(f));
  SentinelClient client(loop.io.get_executor(), options);
  REQUIRE_FALSE(connect(loop, client));
  Load load(loop, client);
  REQUIRE(load.until_on(f.primary().port(), 5s));
  provoke();
  const bool moved = load.until_on(f.replica().port(), limit);
  load.stop();
  REQUIRE(moved);
  CHECK(SentinelFixture::role_of(f.replica().port()) == "master");
  CHECK(load.counts.succeeded > 0);
  CHECK(load.longest < options.command_timeout + 300ms);  // no command hung
  const auto stats = client.stats();
  CHECK(stats.topology_changes >= 1);
  CHECK(stats.connects >= 2);
  // Decisions land on the new primary.
  REQUIRE_FALSE(run_evalsha(loop, client, "after").ec);
  CHECK(f.replica().command({"GET", "after"}) == "1");
  return load.counts;
}


TEST_CASE("sentinel: resolves the primary and decides on it", "[sentinel]") {
  SentinelFixture f(SentinelFixture::Wait::kMonitoring);
  Loop loop;
  SentinelClient client(loop.io.get_executor(), sentinel_options(sentinel_ports(f)));
  CHECK(client.state() == State::kDisconnected);
  REQUIRE_FALSE(connect(loop, client));
  CHECK(client.is_ready());

  const auto r = run_evalsha(loop, client, "hits");
  REQUIRE_FALSE(r.ec);
  CHECK(r.reply.integer == 1);
  CHECK(f.primary().command({"GET", "hits"}) == "1");  // it ran on the primary

  const auto nodes = client.nodes();
  REQUIRE(nodes.size() == 4);
  CHECK(nodes[0].address == address(f.primary().port()));
  CHECK(nodes[0].role == "primary");
  CHECK(nodes[0].state == State::kReady);
  CHECK(nodes[1].role == "sentinel");
  CHECK(nodes[1].address == address(f.sentinel(0).port()));
  CHECK(nodes[1].state == State::kReady);  // it answered
  const auto stats = client.stats();
  CHECK(stats.topology_refresh_ok >= 1);
  CHECK(stats.topology_refresh_error == 0);
  CHECK(stats.topology_changes == 0);
  CHECK(stats.connects == 1);

  client.close();
  CHECK(client.state() == State::kClosed);
  CHECK(run_evalsha(loop, client, "hits").ec == Error::kClosed);
}

TEST_CASE("sentinel: a dead first sentinel is skipped; all dead fails fast and says why",
          "[sentinel]") {
  const std::uint16_t dead = sluice::test::pick_free_port();
  Loop loop;
  {
    SentinelClient client(loop.io.get_executor(), sentinel_options({dead}));
    CHECK(connect(loop, client) == Error::kConnect);
    CHECK_FALSE(client.is_ready());
    CHECK(client.last_error() == Error::kConnect);
    CHECK(client.last_error_message().starts_with("no sentinel answered: " + address(dead) +
                                                  ": connect: "));
    const auto r = run_evalsha(loop, client, "k");
    CHECK(r.ec == Error::kNotConnected);
    CHECK(r.elapsed < 100ms);
    CHECK(client.stats().topology_refresh_error >= 1);
    CHECK(client.stats().not_connected >= 1);
    const auto nodes = client.nodes();
    REQUIRE(nodes.size() == 2);
    CHECK(nodes[1].state == State::kDisconnected);
    CHECK_FALSE(nodes[1].last_error.empty());
  }

  SentinelFixture f(SentinelFixture::Wait::kMonitoring);
  auto ports = sentinel_ports(f);
  ports.insert(ports.begin(), dead);
  SentinelClient client(loop.io.get_executor(), sentinel_options(ports));
  REQUIRE_FALSE(connect(loop, client));
  CHECK_FALSE(run_evalsha(loop, client, "k").ec);
  CHECK(client.nodes().front().address == address(f.primary().port()));
  CHECK(client.last_error_message().empty());
}

TEST_CASE("sentinel: a master name no sentinel knows leaves the client not ready", "[sentinel]") {
  SentinelFixture f(SentinelFixture::Wait::kMonitoring);
  Loop loop;
  SentinelClient client(loop.io.get_executor(), sentinel_options(sentinel_ports(f), "nosuch"));
  CHECK(connect(loop, client) == Error::kServer);
  CHECK(client.last_error_message() == "no sentinel knows master \"nosuch\"");
  CHECK(run_evalsha(loop, client, "k").ec == Error::kNotConnected);
  // It keeps asking, with backoff, and stays not ready.
  const auto errors = client.stats().topology_refresh_error;
  REQUIRE(loop.run_until([&] { return client.stats().topology_refresh_error > errors; }));
  CHECK_FALSE(client.is_ready());
  CHECK(client.nodes().front().address == "(unresolved)");
}

TEST_CASE("sentinel: a sentinel naming an unreachable primary fails commands fast", "[sentinel]") {
  const std::uint16_t nobody = sluice::test::pick_free_port();
  sluice::test::SentinelProcess lone(nobody);  // monitors a port nobody listens on
  Loop loop;
  SentinelClient client(loop.io.get_executor(), sentinel_options({lone.port()}));
  CHECK(connect(loop, client) == Error::kConnect);
  const auto r = run_evalsha(loop, client, "k");
  CHECK(r.ec == Error::kNotConnected);
  CHECK(r.elapsed < 100ms);
  CHECK(client.last_error_message().find("connect " + address(nobody)) != std::string::npos);
  const auto nodes = client.nodes();
  CHECK(nodes.front().address == address(nobody));
  CHECK_FALSE(nodes.front().last_error.empty());
  CHECK(client.stats().topology_refresh_ok >= 1);
}

TEST_CASE("sentinel: a READONLY reply makes the client ask the sentinels again", "[sentinel]") {
  sluice::test::RedisServerFixture primary;
  sluice::test::RedisServerFixture other;
  sluice::test::SentinelProcess lone(primary.port());  // one sentinel: it never fails over
  Loop loop;
  SentinelClient client(loop.io.get_executor(), sentinel_options({lone.port()}));
  REQUIRE_FALSE(connect(loop, client));
  const auto asked = client.stats().topology_refresh_ok;

  // Demoted behind the sentinel's back: writes now answer READONLY.
  REQUIRE(primary.command({"REPLICAOF", "127.0.0.1", std::to_string(other.port())}) == "OK");
  const auto r = run_evalsha(loop, client, "k");
  CHECK(r.ec == Error::kServer);
  CHECK(r.reply.str.starts_with("READONLY"));
  REQUIRE(loop.run_until([&] { return client.stats().topology_refresh_ok > asked; }));
}

TEST_CASE("sentinel: the subscription moves to the next sentinel when its own dies", "[sentinel]") {
  SentinelFixture f;
  Loop loop;
  SentinelClient client(loop.io.get_executor(), sentinel_options(sentinel_ports(f)));
  REQUIRE_FALSE(connect(loop, client));
  // Only the first sentinel has been talked to: it answered and holds the subscription.
  CHECK(client.nodes()[2].state == State::kDisconnected);

  f.sentinel(0).stop();
  REQUIRE(loop.run_until([&] { return client.nodes()[2].state == State::kReady; }));
  const auto nodes = client.nodes();
  CHECK(nodes[1].state == State::kDisconnected);
  CHECK_FALSE(nodes[1].last_error.empty());
  CHECK(client.is_ready());  // the primary connection is not affected

  // A failover is still followed, announced by the sentinels that remain.
  REQUIRE(SentinelFixture::poll([&] {
    return f.sentinel(1)
               .commands({{"SENTINEL", "FAILOVER", sluice::test::kSentinelMaster}})
               .front() == "OK";
  }));
  REQUIRE(loop.run_until(
      [&] { return client.nodes().front().address == address(f.replica().port()); }, 20s));
  REQUIRE(loop.run_until([&] { return !run_evalsha(loop, client, "k").ec; }, 5s));
}

TEST_CASE("sentinel: SENTINEL FAILOVER under load moves the client to the new primary",
          "[sentinel]") {
  SentinelFixture f;
  failover_under_load(f, 20s, [&] {
    // The sentinels may refuse while they still settle; ask until one accepts.
    REQUIRE(SentinelFixture::poll([&] {
      return f.sentinel(0)
                 .commands({{"SENTINEL", "FAILOVER", sluice::test::kSentinelMaster}})
                 .front() == "OK";
    }));
  });
}

TEST_CASE("sentinel: a killed primary is replaced once the sentinels promote the replica",
          "[sentinel]") {
  SentinelFixture f;
  const Load::Counts counts = failover_under_load(f, 30s, [&] { f.primary().stop(); });
  CHECK(counts.failed > 0);  // the window without a primary
}

TEST_CASE("sentinel: a node that must be a primary is refused when it is a replica", "[sentinel]") {
  sluice::test::RedisServerFixture primary;
  sluice::test::RedisServerFixture replica(sluice::test::RedisServerOptions{
      false, {"--replicaof", "127.0.0.1", std::to_string(primary.port())}});
  Loop loop;
  Options options;
  options.port = replica.port();
  options.require_primary = true;
  options.backoff_max = 200ms;
  SingleNodeClient on_replica(loop.io.get_executor(), options);
  CHECK(connect(loop, on_replica) == Error::kServer);
  CHECK(on_replica.last_error_message() ==
        "ROLE: " + address(replica.port()) + " is a replica, not a primary");
  // Every later attempt fails the same way.
  REQUIRE(loop.run_until([&] { return on_replica.stats().connect_failures >= 3; }));
  CHECK_FALSE(on_replica.is_ready());
  CHECK(on_replica.stats().connects == 0);

  options.port = primary.port();
  SingleNodeClient on_primary(loop.io.get_executor(), options);
  CHECK_FALSE(connect(loop, on_primary));
  CHECK(on_primary.is_ready());
}

}  // namespace sentinel_client_test
