// The active health state machine, fed a manual sequence of check results.
#include <catch2/catch.hpp>

#include <string>

#include "upstream/health/health_state.hpp"

namespace sluice {
namespace {

using Change = HealthState::Change;

// Feeds "+" (a good check) and "-" (a failed one); the changes, one letter
// per result: "." none, "U" became unhealthy, "H" became healthy.
std::string feed(HealthState& state, std::string_view results) {
  std::string changes;
  for (const char r : results) {
    switch (state.record(r == '+')) {
      case Change::kNone:
        changes += '.';
        break;
      case Change::kBecameUnhealthy:
        changes += 'U';
        break;
      case Change::kBecameHealthy:
        changes += 'H';
        break;
    }
  }
  return changes;
}

}  // namespace

TEST_CASE("a server starts healthy and good checks keep it so", "[health_state]") {
  HealthState state(2, 3);
  CHECK(state.healthy());
  CHECK(feed(state, "++++") == "....");
  CHECK(state.healthy());
  CHECK(state.streak() == 0);
}

TEST_CASE("unhealthy after unhealthy_threshold failures in a row", "[health_state]") {
  HealthState state(2, 3);
  CHECK(feed(state, "--") == "..");
  CHECK(state.healthy());
  CHECK(state.streak() == 2);
  CHECK(feed(state, "-") == "U");
  CHECK_FALSE(state.healthy());
  CHECK(state.streak() == 0);
  // Further failures change nothing.
  CHECK(feed(state, "---") == "...");
  CHECK_FALSE(state.healthy());
}

TEST_CASE("a good check restarts the count of failures", "[health_state]") {
  HealthState state(2, 3);
  CHECK(feed(state, "--+--+--") == "........");
  CHECK(state.healthy());
  CHECK(feed(state, "-") == "U");
}

TEST_CASE("healthy again after healthy_threshold good checks in a row", "[health_state]") {
  HealthState state(2, 3);
  CHECK(feed(state, "---") == "..U");
  CHECK(feed(state, "+-+-") == "....");  // never two in a row
  CHECK_FALSE(state.healthy());
  CHECK(feed(state, "++") == ".H");
  CHECK(state.healthy());
  // And down again takes the full count once more.
  CHECK(feed(state, "---") == "..U");
}

TEST_CASE("thresholds of 1 change the state at each differing result", "[health_state]") {
  HealthState state(1, 1);
  CHECK(feed(state, "-+-+") == "UHUH");
}

TEST_CASE("new thresholds keep the state and the count", "[health_state]") {
  HealthState state(2, 5);
  CHECK(feed(state, "--") == "..");
  state.set_thresholds(2, 3);
  CHECK(state.healthy());
  CHECK(feed(state, "-") == "U");  // the two failures before the change count
  state.set_thresholds(4, 3);
  CHECK_FALSE(state.healthy());
  CHECK(feed(state, "+++") == "...");
  state.set_thresholds(2, 3);  // lowered below the count: the next good check decides
  CHECK(feed(state, "+") == "H");
}

TEST_CASE("a threshold of 0 counts as 1", "[health_state]") {
  HealthState state(0, 0);
  CHECK(feed(state, "-") == "U");
  CHECK(feed(state, "+") == "H");
}

}  // namespace sluice
