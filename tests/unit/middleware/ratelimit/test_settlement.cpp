// Cost from the response: what a usage value may be, and what a request
// really cost from how its exchange ended.
#include <catch2/catch.hpp>

#include "middleware/ratelimit/settlement/settlement.hpp"

namespace settlement_test {

using sluice::CostFromResponse;
using sluice::ExchangeEnd;

TEST_CASE("settlement: a usage value is a whole number of at most 2^53, digits only",
          "[settlement][unit]") {
  CHECK(sluice::parse_usage("120") == 120);
  CHECK(sluice::parse_usage(" 0 ") == 0);
  CHECK(sluice::parse_usage("007") == 7);
  CHECK(sluice::parse_usage("9007199254740992") == 9007199254740992.0);
  CHECK_FALSE(sluice::parse_usage("9007199254740993"));  // above 2^53
  CHECK_FALSE(sluice::parse_usage("99999999999999999999"));
  for (const char* bad : {"", "-1", "1.5", "12abc", "1e3", "+5", "0x10", "1 2"}) {
    CAPTURE(bad);
    CHECK_FALSE(sluice::parse_usage(bad));
  }
}

TEST_CASE("settlement: the real cost from the status and the usage the response carried",
          "[settlement][unit]") {
  CostFromResponse settle;
  settle.header = "X-Usage-Tokens";
  settle.statuses = {{200, 299}, {304, 304}};
  const auto end = [](unsigned status, std::optional<std::string> usage) {
    ExchangeEnd e;
    e.status = status;
    e.usage = std::move(usage);
    return e;
  };
  CHECK(sluice::settled_cost(settle, end(200, "120"), 500) == 120);
  CHECK(sluice::settled_cost(settle, end(201, "9000"), 500) == 9000);
  CHECK(sluice::settled_cost(settle, end(304, "3"), 500) == 3);
  CHECK(sluice::settled_cost(settle, end(500, "120"), 500) == 0);  // not counted: free
  CHECK(sluice::settled_cost(settle, end(404, std::nullopt), 500) == 0);
  CHECK(sluice::settled_cost(settle, end(200, std::nullopt), 500) == 500);  // none came
  CHECK(sluice::settled_cost(settle, end(200, ""), 500) == 500);  // sent twice
  CHECK(sluice::settled_cost(settle, end(200, "12abc"), 500) == 500);
  CHECK(sluice::settled_cost(settle, end(0, "120"), 500) == 500);  // no response at all
  settle.statuses.clear();  // every status counts
  CHECK(sluice::settled_cost(settle, end(503, "7"), 500) == 7);
}

}  // namespace settlement_test
