// The local fallback's buckets: the share of each limit (capacity / N, refill
// / N), which N applies, the LRU bound and its eviction order, clearing; and
// the fleet heartbeat that feeds N, with a hand-completed sender. A manual
// clock, no sleeping.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "middleware/ratelimit/local/fallback_store.hpp"
#include "middleware/ratelimit/local/fleet_heartbeat.hpp"

using namespace sluice;

namespace fallback_store_test {

struct ManualClock {
  std::int64_t now_us = 1'700'000'000'000'000;
  void advance_ms(std::int64_t ms) { now_us += ms * 1000; }
};

LimitDescriptor bucket(std::string limit, std::uint8_t key, double capacity, double rate) {
  LimitDescriptor d{std::move(limit), {}, capacity, rate};
  d.key_hash[0] = key;
  return d;
}

struct Fixture {
  explicit Fixture(std::size_t max_buckets = FallbackStore::kDefaultMaxBuckets)
      : store(max_buckets, [this] { return clock.now_us; }) {}
  RateDecision decide(const std::vector<LimitDescriptor>& limits, double cost = 1) {
    return store.decide(limits, cost);
  }
  int admit_all(const std::vector<LimitDescriptor>& limits) {
    int admitted = 0;
    while (decide(limits).allowed) ++admitted;
    return admitted;
  }
  ManualClock clock;
  FallbackStore store;
};


TEST_CASE("fallback: each instance holds capacity / N and refills at refill / N",
          "[ratelimit][fallback]") {
  Fixture f;
  f.store.set_configured_fleet_size(4);
  auto limit = bucket("api", 1, 100, 20);
  limit.lease_want = 10;  // no lease is taken locally
  const std::vector<LimitDescriptor> limits = {limit};

  const RateDecision first = f.decide(limits);
  CHECK(first.allowed);
  CHECK(first.local == LocalDecision::kFallback);
  CHECK(first.limits[0].remaining == 24);  // a full share of 25, minus 1
  CHECK(first.limits[0].leased == 0);
  CHECK(first.limits[0].seconds_to_full == Approx(0.2));  // 1 token at 5/s
  CHECK(f.admit_all(limits) == 24);

  const RateDecision denied = f.decide(limits);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.local == LocalDecision::kFallback);
  CHECK(denied.limits[0].seconds_to_cost == Approx(0.2));
  CHECK(denied.limits[0].seconds_to_full == Approx(5));

  f.clock.advance_ms(1000);  // 5 tokens at refill / N
  CHECK(f.admit_all(limits) == 5);
  f.clock.advance_ms(60'000);  // refilled to the share, not to the capacity
  CHECK(f.admit_all(limits) == 25);
}

TEST_CASE("fallback: all buckets of a request or none, each at its share",
          "[ratelimit][fallback]") {
  Fixture f;
  f.store.set_configured_fleet_size(2);
  const auto small = bucket("small", 1, 4, 1);  // share 2
  const auto big = bucket("big", 1, 100, 1);    // share 50
  CHECK(f.admit_all({big, small}) == 2);
  CHECK(f.store.state(big).tokens == 48);  // the denied request debited nothing
  CHECK(f.decide({big}).limits[0].remaining == 47);
}

TEST_CASE("fallback: a concurrency slot it admitted comes back when the exchange ends",
          "[ratelimit][fallback]") {
  Fixture f;
  f.store.set_configured_fleet_size(2);
  LimitDescriptor slots = bucket("in_flight", 1, 4, 0);  // a share of 2 per instance
  slots.algorithm = LimitAlgorithm::kConcurrency;
  slots.lease_ms = 30000;
  CHECK(f.decide({slots}).allowed);
  CHECK(f.decide({slots}).allowed);
  CHECK_FALSE(f.decide({slots}).allowed);  // both held
  f.store.release_slots(std::vector<LimitDescriptor>{slots});
  CHECK(f.decide({slots}).allowed);  // long before the lease would end
  CHECK_FALSE(f.decide({slots}).allowed);
  f.store.release_slots(std::vector<LimitDescriptor>{slots});
  f.store.release_slots(std::vector<LimitDescriptor>{slots});
  f.store.release_slots(std::vector<LimitDescriptor>{slots});  // more than held: nothing more
  CHECK(f.decide({slots}).allowed);
  CHECK(f.decide({slots}).allowed);
  CHECK_FALSE(f.decide({slots}).allowed);
}

TEST_CASE("fallback: a slot is held until its exchange ends, however long past its lease",
          "[ratelimit][fallback]") {
  Fixture f;
  LimitDescriptor slots = bucket("in_flight", 1, 1, 0);
  slots.algorithm = LimitAlgorithm::kConcurrency;
  slots.lease_ms = 1000;
  CHECK(f.decide({slots}).allowed);  // A
  f.clock.advance_ms(1500);          // A still runs, past its lease
  CHECK_FALSE(f.decide({slots}).allowed);
  f.store.release_slots(std::vector<LimitDescriptor>{slots});  // A ends
  CHECK(f.decide({slots}).allowed);                            // B
  CHECK_FALSE(f.decide({slots}).allowed);
}

TEST_CASE("fallback: N is the configured size, else the learned count, else 1",
          "[ratelimit][fallback]") {
  FallbackStore store;
  CHECK(store.fleet_size() == 1);  // never learned
  store.set_learned_fleet_size(3);
  CHECK(store.fleet_size() == 3);
  store.set_learned_fleet_size(0);  // not an answer: the last count stays
  CHECK(store.fleet_size() == 3);
  store.set_configured_fleet_size(5);
  CHECK(store.fleet_size() == 5);
  store.set_learned_fleet_size(2);
  CHECK(store.fleet_size() == 5);
  store.set_configured_fleet_size(0);
  CHECK(store.fleet_size() == 2);
}

TEST_CASE("fallback: at most max_buckets, the least recently used evicted first",
          "[ratelimit][fallback]") {
  Fixture f(3);
  const auto a = bucket("l", 1, 10, 1);
  const auto b = bucket("l", 2, 10, 1);
  const auto c = bucket("l", 3, 10, 1);
  const auto d = bucket("l", 4, 10, 1);
  for (const auto& x : {a, b, c}) REQUIRE(f.decide({x}).allowed);
  REQUIRE(f.decide({a}).allowed);  // a is now the most recently used; b the least
  REQUIRE(f.decide({d}).allowed);
  CHECK(f.store.size() == 3);
  CHECK_FALSE(f.store.state(b).exists);
  CHECK(f.store.state(a).tokens == 8);
  CHECK(f.store.state(c).exists);
  CHECK(f.store.state(d).exists);
  // An evicted bucket starts full again.
  CHECK(f.decide({b}).limits[0].remaining == 9);
  CHECK_FALSE(f.store.state(c).exists);  // c was the least recently used then

  // A denied request touches its buckets too.
  for (int i = 0; i < 8; ++i) REQUIRE(f.decide({a}).allowed);
  REQUIRE_FALSE(f.decide({a}).allowed);  // order now: a, b, d
  REQUIRE(f.decide({c}).allowed);
  CHECK_FALSE(f.store.state(d).exists);
  CHECK(f.store.state(a).exists);

  f.store.set_max_buckets(1);
  CHECK(f.store.size() == 1);
  CHECK(f.store.state(c).exists);
}

TEST_CASE(
    "fallback: Redis deciding a bucket again forgets it; a quiet second forgets the full ones",
    "[ratelimit][fallback]") {
  Fixture f;
  const std::vector<LimitDescriptor> a = {bucket("l", 1, 3, 1)};
  const std::vector<LimitDescriptor> b = {bucket("l", 2, 3, 1)};
  f.store.on_store_decided(a);  // nothing held: nothing to do
  CHECK(f.store.size() == 0);
  CHECK(f.admit_all(a) == 3);
  CHECK(f.admit_all(b) == 3);
  CHECK(f.store.size() == 2);
  // Redis decides a again (another slot may still be down): only a goes.
  f.store.on_store_decided(a);
  CHECK(f.store.size() == 1);
  CHECK_FALSE(f.store.state(a[0]).exists);
  CHECK(f.store.state(b[0]).exists);
  // No request needed the store for a second, but b has refilled only one
  // token of three: its part of Redis may still be down, it stays.
  f.clock.now_us += FallbackStore::kQuietUs;
  f.store.on_store_decided(a);
  CHECK(f.store.size() == 1);
  // Once b is full again it is as good as absent, and goes.
  f.clock.now_us += 2 * FallbackStore::kQuietUs;
  f.store.on_store_decided(a);
  CHECK(f.store.size() == 0);
  CHECK(f.admit_all(b) == 3);
  f.store.clear();
  CHECK_FALSE(f.store.state(b[0]).exists);
}

TEST_CASE("fleet heartbeat: beats at once, learns the live count, keeps it on errors, leaves",
          "[ratelimit][fallback]") {
  boost::asio::io_context io;
  auto store = std::make_shared<FallbackStore>();
  struct Sent {
    bool leave;
    FleetHeartbeat::Done done;
  };
  std::vector<Sent> sent;
  int failures = 0;
  auto heartbeat = std::make_shared<FleetHeartbeat>(
      io.get_executor(),
      [&sent](bool leave, FleetHeartbeat::Done done) {
        sent.push_back({leave, std::move(done)});
      },
      store, [&failures] { ++failures; });

  bool left = false;
  SECTION("an instance that never beat has nothing to remove") {
    heartbeat->leave([&left] { left = true; });
    CHECK_FALSE(left);  // never inside the call
    io.poll();
    CHECK(left);
    CHECK(sent.empty());
  }
  SECTION("the first heartbeat may fail unreported; the second is counted") {
    heartbeat->enable(true);
    REQUIRE(sent.size() == 1);
    sent[0].done(std::make_error_code(std::errc::not_connected), 0, "");
    CHECK(failures == 0);
    heartbeat->enable(false);
    heartbeat->enable(true);
    REQUIRE(sent.size() == 2);
    sent[1].done({}, 0, "");  // no live member: not an answer
    CHECK(failures == 1);
    CHECK(store->fleet_size() == 1);
  }
  SECTION("enabled") {
    heartbeat->enable(true);
    heartbeat->enable(true);  // idempotent: one beat
    REQUIRE(sent.size() == 1);
    CHECK_FALSE(sent[0].leave);
    sent[0].done({}, 3, "");
    CHECK(store->fleet_size() == 3);
    CHECK(store->fleet_size() == 3);
    CHECK(failures == 0);
    heartbeat->enable(false);
    heartbeat->enable(true);
    REQUIRE(sent.size() == 2);
    sent[1].done(std::make_error_code(std::errc::timed_out), 0, "");
    CHECK(store->fleet_size() == 3);  // Redis did not answer: the last count stays
    CHECK(failures == 1);             // counted

    heartbeat->leave([&left] { left = true; });
    REQUIRE(sent.size() == 3);
    CHECK(sent[2].leave);
    CHECK_FALSE(left);
    sent[2].done({}, 2, "");
    CHECK(left);
    CHECK(store->fleet_size() == 3);  // the count after leaving is not ours
  }
}

TEST_CASE("fallback store: a learned fleet size is bounded by local.max_fleet_size",
          "[ratelimit][fallback]") {
  FallbackStore store;
  store.set_learned_fleet_size(5000);
  CHECK(store.fleet_size() == 1000);  // the default bound
  store.set_max_learned_fleet_size(8);
  CHECK(store.fleet_size() == 8);
  store.set_learned_fleet_size(3);
  CHECK(store.fleet_size() == 3);
  store.set_configured_fleet_size(20);  // a configured size is not bounded by it
  CHECK(store.fleet_size() == 20);
}

TEST_CASE("fleet heartbeat: the instance id is 16 random bytes in hex", "[ratelimit][fallback]") {
  const std::string a = random_instance_id();
  CHECK(a.size() == 32);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != random_instance_id());
}

}  // namespace fallback_store_test
