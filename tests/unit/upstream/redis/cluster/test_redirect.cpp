#include <catch2/catch.hpp>

#include "upstream/redis/cluster/redirect.hpp"

using sluice::redis::cluster::parse_redirect;
using RedirectKind = sluice::redis::cluster::Redirect::Kind;

TEST_CASE("cluster redirect: MOVED and ASK name a slot and an address") {
  auto moved = parse_redirect("MOVED 3999 127.0.0.1:6381");
  REQUIRE(moved);
  CHECK(moved->kind == RedirectKind::kMoved);
  CHECK(moved->slot == 3999);
  CHECK(moved->host == "127.0.0.1");
  CHECK(moved->port == 6381);

  auto ask = parse_redirect("ASK 16383 redis-2.internal:7000");
  REQUIRE(ask);
  CHECK(ask->kind == RedirectKind::kAsk);
  CHECK(ask->slot == 16383);
  CHECK(ask->host == "redis-2.internal");
  CHECK(ask->port == 7000);
}

TEST_CASE("cluster redirect: IPv6 hosts and an unknown host") {
  auto v6 = parse_redirect("MOVED 0 ::1:6380");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == 6380);
  auto unknown = parse_redirect("MOVED 12 :6380");  // the answering node's own host
  REQUIRE(unknown);
  CHECK(unknown->host.empty());
  CHECK(unknown->port == 6380);
}

TEST_CASE("cluster redirect: TRYAGAIN and CLUSTERDOWN") {
  auto again = parse_redirect("TRYAGAIN Multiple keys request during rehashing of slot");
  REQUIRE(again);
  CHECK(again->kind == RedirectKind::kTryAgain);
  auto down = parse_redirect("CLUSTERDOWN The cluster is down");
  REQUIRE(down);
  CHECK(down->kind == RedirectKind::kClusterDown);
  CHECK(parse_redirect("CLUSTERDOWN"));
}

TEST_CASE("cluster redirect: anything else is not a redirect") {
  for (const char* error :
       {"ERR unknown command", "NOSCRIPT No matching script", "READONLY You can't write", "MOVED",
        "MOVED 3999", "MOVED 3999 127.0.0.1", "MOVED 16384 127.0.0.1:6379",
        "MOVED -1 127.0.0.1:6379", "MOVED x 127.0.0.1:6379", "MOVED 1 127.0.0.1:0",
        "MOVED 1 127.0.0.1:65536", "MOVED 1 127.0.0.1:6379x", "MOVED 1 a b:6379",
        "MOVEDX 1 127.0.0.1:6379", "ASKING", "TRYAGAINX", "moved 1 127.0.0.1:6379", ""}) {
    INFO("error: " << error);
    CHECK_FALSE(parse_redirect(error));
  }
}

TEST_CASE("cluster next step: redirects are followed a bounded number of times") {
  using sluice::redis::cluster::kMaxRedirects;
  using sluice::redis::cluster::next_step;
  using Step = sluice::redis::cluster::NextStep::Kind;

  CHECK(next_step(false, "MOVED 1 127.0.0.1:7000", "127.0.0.1", 0).kind == Step::kComplete);
  CHECK(next_step(true, "ERR wrong number of arguments", "127.0.0.1", 0).kind == Step::kComplete);
  CHECK(next_step(true, "MOVED nonsense", "127.0.0.1", 0).kind == Step::kComplete);

  const auto moved = next_step(true, "MOVED 3999 10.0.0.2:6381", "127.0.0.1", 0);
  CHECK(moved.kind == Step::kFollowMoved);
  CHECK(moved.slot == 3999);
  CHECK(moved.target.host == "10.0.0.2");
  CHECK(moved.target.port == 6381);

  const auto ask = next_step(true, "ASK 12 :7002", "127.0.0.5", 1);
  CHECK(ask.kind == Step::kFollowAsk);
  CHECK(ask.target.host == "127.0.0.5");  // the answering node's own host
  CHECK(ask.target.port == 7002);

  CHECK(next_step(true, "TRYAGAIN Multiple keys request during rehashing of slot", "h", 2).kind ==
        Step::kRetryLater);
  CHECK(next_step(true, "CLUSTERDOWN The cluster is down", "h", 0).kind == Step::kClusterDown);

  // Past the bound the last reply is the answer; CLUSTERDOWN still refreshes.
  CHECK(next_step(true, "MOVED 1 127.0.0.1:7000", "h", kMaxRedirects).kind == Step::kComplete);
  CHECK(next_step(true, "TRYAGAIN x", "h", kMaxRedirects).kind == Step::kComplete);
  CHECK(next_step(true, "CLUSTERDOWN x", "h", kMaxRedirects).kind == Step::kClusterDown);
}
