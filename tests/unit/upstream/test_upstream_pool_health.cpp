// The round robin skips servers whose health flag says unhealthy, follows a
// new table of flags, and leaves unchecked servers alone. No I/O happens.
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>

#include "upstream/upstream_pool.hpp"

namespace sluice {
namespace {

struct Fixture {
  Fixture() {
    upstream.name = "app";
    upstream.servers = {{"127.0.0.1", 9001}, {"127.0.0.1", 9002}, {"127.0.0.1", 9003}};
  }
  std::shared_ptr<ServerHealth> check(UpstreamHealth& table, std::size_t server) {
    auto flag = std::make_shared<ServerHealth>();
    table.add(upstream.name, upstream.servers[server], flag);
    return flag;
  }
  std::vector<std::size_t> picks(std::size_t n) {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < n; ++i) {
      auto s = pools.pick(upstream, {});
      out.push_back(s ? *s : 99);
    }
    return out;
  }
  boost::asio::io_context io;
  UpstreamPools pools{io.get_executor()};
  UpstreamConfig upstream;
};

}  // namespace

TEST_CASE("the round robin skips an unhealthy server", "[upstream_pool]") {
  Fixture f;
  auto table = std::make_shared<UpstreamHealth>();
  auto second = f.check(*table, 1);
  f.pools.set_health(table);
  CHECK(f.picks(3) == std::vector<std::size_t>{0, 1, 2});
  CHECK_FALSE(f.pools.any_unhealthy(f.upstream));

  second->healthy = false;
  CHECK(f.picks(4) == std::vector<std::size_t>{0, 2, 0, 2});
  CHECK(f.pools.any_unhealthy(f.upstream));

  second->healthy = true;
  CHECK(f.picks(3) == std::vector<std::size_t>{0, 1, 2});
}

TEST_CASE("no server is picked when every server is unhealthy", "[upstream_pool]") {
  Fixture f;
  auto table = std::make_shared<UpstreamHealth>();
  std::vector<std::shared_ptr<ServerHealth>> flags;
  for (std::size_t i = 0; i < 3; ++i) flags.push_back(f.check(*table, i));
  f.pools.set_health(table);
  for (auto& flag : flags) flag->healthy = false;
  CHECK_FALSE(f.pools.pick(f.upstream, {}));
  CHECK(f.pools.any_unhealthy(f.upstream));
}

TEST_CASE("a new table replaces the flags of servers already seen", "[upstream_pool]") {
  Fixture f;
  auto before = std::make_shared<UpstreamHealth>();
  f.check(*before, 0)->healthy = false;
  f.pools.set_health(before);
  CHECK(f.picks(2) == std::vector<std::size_t>{1, 2});
  // The next configuration checks no server: all of them are picked again.
  f.pools.set_health(std::make_shared<UpstreamHealth>());
  CHECK(f.picks(3) == std::vector<std::size_t>{0, 1, 2});
  CHECK_FALSE(f.pools.any_unhealthy(f.upstream));
}

TEST_CASE("the flags are per upstream", "[upstream_pool]") {
  Fixture f;
  auto table = std::make_shared<UpstreamHealth>();
  auto flag = std::make_shared<ServerHealth>();
  flag->healthy = false;
  table->add("other", f.upstream.servers[0], flag);  // the same address, another upstream
  f.pools.set_health(table);
  CHECK(f.picks(3) == std::vector<std::size_t>{0, 1, 2});
}

}  // namespace sluice
