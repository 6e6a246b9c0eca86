// Requests waiting for a connection slot of a server at max_connections: the
// one still waiting gets the slot a closed connection frees, and those that
// gave up do not pile up while no slot frees (a long WebSocket tunnel).
#include <catch2/catch.hpp>

#include <memory>

#include <boost/asio/io_context.hpp>

#include "upstream/upstream_pool.hpp"

namespace sluice {

TEST_CASE("waiters that gave up are trimmed while every slot stays held", "[upstream_pool]") {
  boost::asio::io_context io;
  UpstreamPools pools{io.get_executor()};
  UpstreamConfig upstream;
  upstream.name = "app";
  upstream.servers = {{"127.0.0.1", 9001}};
  upstream.max_connections = 1;

  auto held = pools.open(upstream, 0);  // a tunnel holding the one slot
  REQUIRE(held);
  REQUIRE_FALSE(pools.open(upstream, 0));

  // Each waiter that gave up holds a token: it is freed once trimmed.
  auto token = std::make_shared<int>(0);
  int taken_by_stale = 0;
  for (int i = 0; i < 1000; ++i) {
    pools.wait_for_slot(upstream, 0, [token, &taken_by_stale](bool take) {
      if (take) ++taken_by_stale;
      return false;  // gave up: never takes a turn
    });
  }
  // At most the entries pushed since the last trim are left.
  CHECK(token.use_count() - 1 <= 128);

  bool live_took = false;
  pools.wait_for_slot(upstream, 0, [&live_took](bool take) {
    if (take) live_took = true;
    return true;
  });
  held.reset();  // the tunnel ends: its slot goes to the one still waiting
  io.run();
  CHECK(live_took);
  CHECK(taken_by_stale <= 128);
}

}  // namespace sluice
