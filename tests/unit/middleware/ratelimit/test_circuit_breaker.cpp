// The Redis circuit breaker with a manual clock.
#include <catch2/catch.hpp>
#include <chrono>

#include "middleware/ratelimit/circuit_breaker.hpp"

namespace circuit_breaker_test {

using namespace std::chrono_literals;
using sluice::CircuitBreaker;
using State = sluice::CircuitBreaker::State;

struct Fixture {
  CircuitBreaker::Clock::time_point now{std::chrono::seconds(1000)};
  CircuitBreaker breaker{3, 1000ms};

  void fail(int times) {
    for (int i = 0; i < times; ++i) {
      REQUIRE(breaker.allow(now));
      breaker.on_failure(now);
    }
  }
};


TEST_CASE("breaker: consecutive failures open it", "[ratelimit][breaker]") {
  Fixture f;
  CHECK(f.breaker.state(f.now) == State::kClosed);
  f.fail(2);
  CHECK(f.breaker.state(f.now) == State::kClosed);
  CHECK(f.breaker.consecutive_failures() == 2);

  SECTION("a success resets the count") {
    REQUIRE(f.breaker.allow(f.now));
    f.breaker.on_success(f.now);
    CHECK(f.breaker.consecutive_failures() == 0);
    f.fail(2);
    CHECK(f.breaker.state(f.now) == State::kClosed);
  }
  SECTION("the third failure opens it; calls are refused for open_ms") {
    f.fail(1);
    CHECK(f.breaker.state(f.now) == State::kOpen);
    CHECK(f.breaker.is_open(f.now));
    CHECK_FALSE(f.breaker.allow(f.now));
    CHECK_FALSE(f.breaker.allow(f.now + 999ms));
    CHECK(f.breaker.state(f.now + 1000ms) == State::kHalfOpen);
  }
}

TEST_CASE("breaker: half-open lets exactly one trial through", "[ratelimit][breaker]") {
  Fixture f;
  f.fail(3);
  f.now += 1000ms;
  CHECK(f.breaker.allow(f.now));  // the trial
  CHECK(f.breaker.state(f.now) == State::kHalfOpen);
  CHECK_FALSE(f.breaker.allow(f.now));
  CHECK_FALSE(f.breaker.allow(f.now + 500ms));

  SECTION("trial success closes") {
    f.breaker.on_success(f.now + 10ms);
    CHECK(f.breaker.state(f.now + 10ms) == State::kClosed);
    CHECK(f.breaker.allow(f.now + 10ms));
    CHECK(f.breaker.allow(f.now + 10ms));
    CHECK(f.breaker.consecutive_failures() == 0);
  }
  SECTION("trial failure re-opens for another open_ms") {
    f.now += 20ms;
    f.breaker.on_failure(f.now);
    CHECK(f.breaker.state(f.now) == State::kOpen);
    CHECK_FALSE(f.breaker.allow(f.now + 999ms));
    CHECK(f.breaker.allow(f.now + 1000ms));  // the next trial
    CHECK_FALSE(f.breaker.allow(f.now + 1000ms));
  }
  SECTION("a trial that never reports back is replaced after open_ms") {
    CHECK_FALSE(f.breaker.allow(f.now + 999ms));
    CHECK(f.breaker.allow(f.now + 1000ms));
    CHECK_FALSE(f.breaker.allow(f.now + 1001ms));
  }
}

TEST_CASE("breaker: late outcomes of calls made before it opened", "[ratelimit][breaker]") {
  Fixture f;
  // Three calls in flight, all let through while closed.
  for (int i = 0; i < 4; ++i) REQUIRE(f.breaker.allow(f.now));
  for (int i = 0; i < 3; ++i) f.breaker.on_failure(f.now);
  REQUIRE(f.breaker.state(f.now) == State::kOpen);
  // The fourth reports while open: neither closes it nor extends the open time.
  f.breaker.on_success(f.now + 100ms);
  CHECK(f.breaker.state(f.now + 100ms) == State::kOpen);
  f.breaker.on_failure(f.now + 200ms);
  CHECK(f.breaker.state(f.now + 1000ms) == State::kHalfOpen);
}

TEST_CASE("breaker: a threshold of 0 acts as 1", "[ratelimit][breaker]") {
  CircuitBreaker breaker(0, 50ms);
  const CircuitBreaker::Clock::time_point t0{};
  REQUIRE(breaker.allow(t0));
  breaker.on_failure(t0);
  CHECK(breaker.state(t0) == State::kOpen);
  CHECK(breaker.state(t0 + 50ms) == State::kHalfOpen);
}

TEST_CASE("breaker: open_remaining counts down the open period", "[ratelimit][breaker]") {
  Fixture f;
  CHECK(f.breaker.open_remaining(f.now) == 0ms);  // closed
  f.fail(3);
  CHECK(f.breaker.open_remaining(f.now) == 1000ms);
  CHECK(f.breaker.open_remaining(f.now + 250ms) == 750ms);
  CHECK(f.breaker.open_remaining(f.now + 999ms) == 1ms);
  CHECK(f.breaker.open_remaining(f.now + 1000ms) == 0ms);  // half-open: a trial may go
  REQUIRE(f.breaker.allow(f.now + 1000ms));
  CHECK(f.breaker.open_remaining(f.now + 1000ms) == 0ms);  // trial in flight
  f.breaker.on_failure(f.now + 1010ms);
  CHECK(f.breaker.open_remaining(f.now + 1010ms) == 1000ms);  // re-opened in full
  CHECK(f.breaker.open_for() == 1000ms);
}

TEST_CASE("breaker: a failed probe outside the trial reopens it; a closed one stays closed",
          "[ratelimit][breaker]") {
  Fixture f;
  f.breaker.reopen(f.now);
  CHECK(f.breaker.state(f.now) == State::kClosed);
  f.fail(3);
  CHECK(f.breaker.state(f.now + 1500ms) == State::kHalfOpen);
  f.breaker.reopen(f.now + 1500ms);
  CHECK(f.breaker.state(f.now + 1500ms) == State::kOpen);
  CHECK(f.breaker.open_remaining(f.now + 1500ms) == 1000ms);
  CHECK(f.breaker.state(f.now + 2500ms) == State::kHalfOpen);
}

}  // namespace circuit_breaker_test
