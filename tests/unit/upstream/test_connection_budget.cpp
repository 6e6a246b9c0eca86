// The process's budget of upstream descriptors: a connection that would go
// past it is not opened, a closed one gives its descriptor back, and an
// upstream without max_connections gets a default bound from the budget.
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>

#include "upstream/connection_budget.hpp"
#include "upstream/upstream_pool.hpp"

namespace sluice {

TEST_CASE("the default bound per server is a quarter of the budget per worker, at most 1024",
          "[connection_budget]") {
  CHECK(ConnectionBudget::default_per_server(192, 1) == 48);
  CHECK(ConnectionBudget::default_per_server(192, 2) == 24);
  CHECK(ConnectionBudget::default_per_server(9936, 2) == 1024);
  CHECK(ConnectionBudget::default_per_server(3, 4) == 1);  // never 0
  CHECK(ConnectionBudget::default_per_server(ConnectionBudget::kUnlimited, 8) == 1024);
}

TEST_CASE("tickets take from the budget and give back when they go", "[connection_budget]") {
  ConnectionBudget budget;
  budget.set_limit(2, 1);
  DescriptorTicket a;
  DescriptorTicket b;
  REQUIRE(budget.try_take());
  a = DescriptorTicket(&budget);
  REQUIRE(budget.try_take());
  b = DescriptorTicket(&budget);
  CHECK_FALSE(budget.try_take());
  CHECK(budget.refusals() == 0);  // counted by the caller that gives up
  CHECK(budget.in_use() == 2);
  DescriptorTicket moved = std::move(a);
  CHECK(budget.in_use() == 2);
  moved.release();
  CHECK(budget.in_use() == 1);
  { DescriptorTicket gone = std::move(b); }
  CHECK(budget.in_use() == 0);
}

TEST_CASE("pools open no connection beyond the process's budget", "[connection_budget]") {
  boost::asio::io_context io;
  UpstreamPools pools{io.get_executor()};
  UpstreamConfig upstream;
  upstream.name = "app";
  upstream.servers = {{"127.0.0.1", 9001}};
  upstream.max_connections = 0;  // no bound per server: only the budget

  auto& budget = connection_budget();
  const std::size_t before = budget.in_use();
  const std::size_t limit_before = budget.limit();
  budget.set_limit(before + 3, 1);
  {
    auto c1 = pools.open(upstream, 0);
    auto c2 = pools.open(upstream, 0);
    auto c3 = pools.open(upstream, 0);
    REQUIRE((c1 && c2 && c3));
    const auto refused = budget.refusals();
    CHECK_FALSE(pools.open(upstream, 0));
    CHECK(budget.refusals() == refused + 1);
    c2.reset();
    CHECK(pools.open(upstream, 0));  // the freed descriptor is taken again (and freed)
  }
  CHECK(budget.in_use() == before);
  budget.set_limit(limit_before, 1);
}

TEST_CASE("an upstream without max_connections is bounded by the budget's default",
          "[connection_budget]") {
  UpstreamConfig upstream;
  auto& budget = connection_budget();
  const std::size_t limit_before = budget.limit();
  budget.set_limit(400, 2);
  CHECK(connection_cap(upstream) == 50);
  upstream.max_connections = 0;
  CHECK(connection_cap(upstream) == ConnectionBudget::kUnlimited);
  upstream.max_connections = 7;
  CHECK(connection_cap(upstream) == 7);
  budget.set_limit(limit_before, 1);
}

}  // namespace sluice
