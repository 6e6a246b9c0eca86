// The cost of a request from its cost header: parsing, clamping, duplicates.
#include <catch2/catch.hpp>
#include <vector>

#include "middleware/ratelimit/request_cost.hpp"
#include "support/request_view_fixture.hpp"

namespace {

using sluice::LimitDescriptor;
using sluice::RouteConfig;
using sluice::testing::Request;

RouteConfig route_with_header(double max_cost = 0) {
  RouteConfig route;
  route.name = "api";
  route.cost = 2;
  route.cost_header = "X-Cost";
  route.max_cost = max_cost;
  return route;
}

std::vector<LimitDescriptor> limits(double a, double b) {
  LimitDescriptor first;
  first.limit = "a";
  first.capacity = a;
  LimitDescriptor second;
  second.limit = "b";
  second.capacity = b;
  return {first, second};
}

}  // namespace

TEST_CASE("cost header values: digits only, at least 1", "[ratelimit][cost]") {
  using sluice::parse_cost_value;
  CHECK(parse_cost_value("7") == 7);
  CHECK(parse_cost_value(" 12 ") == 12);
  CHECK(parse_cost_value("007") == 7);
  CHECK(parse_cost_value("1") == 1);
  CHECK(parse_cost_value("999999999999999") == 999999999999999.0);
  // Longer than kMaxCostDigits: larger than any max_cost, so it is clamped.
  CHECK(parse_cost_value("99999999999999999999999") == 1e15);
  CHECK(parse_cost_value("0000000000000000000000000001") == 1);
  for (const char* bad :
       {"", " ", "0", "000", "-3", "+3", "2.5", "1e3", "abc", "7 7", "0x10", "７"}) {
    INFO(bad);
    CHECK_FALSE(parse_cost_value(bad));
  }
}

TEST_CASE("request cost: header value, fallback to the route's cost, clamping",
          "[ratelimit][cost]") {
  const auto buckets = limits(50, 20);
  SECTION("the header's value") {
    CHECK(sluice::request_cost(route_with_header(), "7", buckets) == 7);
  }
  SECTION("missing, non-numeric, zero or negative: the route's cost") {
    CHECK(sluice::request_cost(route_with_header(), std::nullopt, buckets) == 2);
    for (const char* bad : {"lots", "0", "-4", ""}) {
      INFO(bad);
      CHECK(sluice::request_cost(route_with_header(), bad, buckets) == 2);
    }
  }
  SECTION("max_cost 0 clamps to the smallest capacity of the request's buckets") {
    CHECK(sluice::max_request_cost(route_with_header(), buckets) == 20);
    CHECK(sluice::request_cost(route_with_header(), "21", buckets) == 20);
    CHECK(sluice::request_cost(route_with_header(), "20", buckets) == 20);
    CHECK(sluice::request_cost(route_with_header(), "99999999999999999999", buckets) == 20);
  }
  SECTION("an explicit max_cost") {
    CHECK(sluice::request_cost(route_with_header(10), "11", buckets) == 10);
    CHECK(sluice::request_cost(route_with_header(10), "9", buckets) == 9);
  }
  SECTION("a route without a cost header ignores any header") {
    RouteConfig route = route_with_header();
    route.cost_header.clear();
    CHECK(sluice::request_cost(route, "7", buckets) == 2);
    Request request;
    request.header("X-Cost", "7");
    CHECK(sluice::request_cost(route, request.view(), buckets) == 2);
  }
  SECTION("read from the request, case-insensitively") {
    Request request;
    request.header("x-cost", "7");
    CHECK(sluice::request_cost(route_with_header(), request.view(), buckets) == 7);
    CHECK(sluice::request_cost(route_with_header(), Request{}.view(), buckets) == 2);
  }
}

TEST_CASE("a repeated cost header is refused", "[ratelimit][cost]") {
  Request once;
  once.header("X-Cost", "3");
  CHECK_FALSE(sluice::check_cost_header(route_with_header(), once.view()));
  Request twice;
  twice.repeat("X-Cost", "3", 2);
  const auto refusal = sluice::check_cost_header(route_with_header(), twice.view());
  REQUIRE(refusal);
  CHECK(refusal->reason == sluice::KeyRefusal::Reason::kDuplicateIdentity);
  CHECK(refusal->message == "more than one X-Cost header");
  RouteConfig no_header = route_with_header();
  no_header.cost_header.clear();
  CHECK_FALSE(sluice::check_cost_header(no_header, twice.view()));
}
