// The local layer in front of a fake store completed by hand, with a manual
// clock: what it answers itself (denial cache, leases), what it asks the
// store and with which lease, and what it gives back (expiry, reload, drain).
#include <catch2/catch.hpp>

#include <optional>

#include <boost/asio/post.hpp>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/local_layer.hpp"
#include "tests/support/io_loop.hpp"

using namespace sluice;

namespace local_layer_test {

class FakeStore final : public RateLimiter {
 public:
  explicit FakeStore(boost::asio::io_context& io) : io_(io) {}
  void decide(const std::vector<LimitDescriptor>& descriptors, double cost,
              RateDecisionHandler handler) override {
    calls.push_back({descriptors, cost, std::move(handler)});
  }
  void refund(std::vector<BucketRefund> r, RefundHandler done) override {
    refunds.insert(refunds.end(), r.begin(), r.end());
    if (done) boost::asio::post(io_, [done] { done({}); });
  }
  // Answers the oldest open call with one state per bucket.
  void answer(bool allowed, sluice::LimitStates states) {
    REQUIRE(!calls.empty());
    RateDecision d;
    d.allowed = allowed;
    d.limits = std::move(states);
    auto h = std::move(calls.front().handler);
    calls.erase(calls.begin());
    boost::asio::post(io_, [h = std::move(h), d]() mutable { h({}, std::move(d)); });
  }
  struct Call {
    std::vector<LimitDescriptor> descriptors;
    double cost;
    RateDecisionHandler handler;
  };
  std::vector<Call> calls;
  std::vector<BucketRefund> refunds;

 private:
  boost::asio::io_context& io_;
};

LimitState state(bool sufficient, double remaining, double to_cost = 0, double leased = 0) {
  LimitState s;
  s.sufficient = sufficient;
  s.remaining = remaining;
  s.seconds_to_cost = to_cost;
  s.leased = leased;
  return s;
}

struct Harness {
  test::Loop loop;
  MetricsShard metrics;
  std::int64_t now = 1'000'000;
  std::shared_ptr<FakeStore> store = std::make_shared<FakeStore>(loop.io);
  std::shared_ptr<LocalLayer> layer;
  std::optional<RateDecision> last;

  explicit Harness(bool deny_cache = true) {
    LocalConfig config;
    config.deny_cache = deny_cache;
    layer = std::make_shared<LocalLayer>(loop.io.get_executor(), store, metrics, config,
                                         [this] { return now; });
  }
  // A call left unanswered holds the layer (its handler does): drop them.
  ~Harness() { store->calls.clear(); }
  // Decides and runs the loop until answered; nullopt if the store was asked
  // and has not answered.
  std::optional<RateDecision> decide(const std::vector<LimitDescriptor>& ds, double cost = 1) {
    last.reset();
    kept = ds;
    layer->decide(kept, cost, [this](std::error_code ec, RateDecision d) {
      REQUIRE_FALSE(ec);
      last = std::move(d);
    });
    loop.run_until([&] { return last.has_value(); }, std::chrono::milliseconds(20));
    return last;
  }
  RateDecision await() {
    REQUIRE(loop.run_until([&] { return last.has_value(); }));
    return *last;
  }
  std::vector<LimitDescriptor> kept;  // outlives the decision, as the middleware's does
};

LimitDescriptor bucket(const char* limit, const char* key, double capacity, double rate,
                       double lease_tokens = 0) {
  LimitDescriptor d{limit, key_hash(key), capacity, rate};
  d.lease_tokens = lease_tokens;
  return d;
}

// Spends `g`'s lease until its background top-up is out; the top-up's ask.
double spend_until_top_up(Harness& h, const LimitDescriptor& g) {
  while (h.store->calls.empty()) REQUIRE(h.decide({g}));
  return h.store->calls.back().descriptors[0].lease_want;
}

// Requests on `g` every 4 ms until the store granted a lease, each store call
// answered with the lease it asked for.
void warm_lease(Harness& h, const LimitDescriptor& g) {
  for (int i = 0; i < 30 && h.layer->leases().held_tokens() == 0; ++i) {
    h.now += 4'000;
    if (h.decide({g})) continue;
    const double want = h.store->calls.back().descriptors[0].lease_want;
    h.store->answer(true, {state(true, 900, 0, want)});
    h.await();
  }
}

TEST_CASE("local layer: a denied bucket is denied locally until it can refill",
          "[ratelimit][local]") {
  Harness h;
  const auto b = bucket("per_key", "alice", 2, 0.5);
  CHECK_FALSE(h.decide({b}));
  REQUIRE(h.store->calls.size() == 1);
  h.store->answer(false, {state(false, 0.5, 1.0)});  // 1 s to the next token
  CHECK_FALSE(h.await().allowed);

  h.now += 500'000;
  auto d = h.decide({b});
  REQUIRE(d);  // answered without the store
  CHECK(h.store->calls.empty());
  CHECK_FALSE(d->allowed);
  CHECK(d->local == LocalDecision::kDenyCache);
  CHECK(d->limits[0].seconds_to_cost == Approx(0.5));
  CHECK(d->limits[0].remaining == Approx(0.75));

  h.now += 500'000;  // the bucket may hold a token again: ask
  CHECK_FALSE(h.decide({b}));
  CHECK(h.store->calls.size() == 1);
}

TEST_CASE("local layer: decide_or_wait answers a lease or a remembered denial at once",
          "[ratelimit][local][lease]") {
  Harness h;
  int called = 0;
  RateDecisionHandler handler = [&called](std::error_code, RateDecision&&) { ++called; };
  const auto g = bucket("global", "all", 1000, 100, 50);
  warm_lease(h, g);
  REQUIRE(h.layer->leases().held_tokens() > 0);
  h.kept = {g};
  auto leased = h.layer->decide_or_wait(h.kept, 1, handler);
  REQUIRE(leased);
  CHECK(leased->allowed);
  CHECK(leased->local == LocalDecision::kLease);
  CHECK(handler);  // not taken

  const auto b = bucket("per_key", "alice", 2, 0.5);
  CHECK_FALSE(h.decide({b}));
  h.store->answer(false, {state(false, 0.5, 1.0)});
  CHECK_FALSE(h.await().allowed);
  h.kept = {b};
  auto denied = h.layer->decide_or_wait(h.kept, 1, handler);
  REQUIRE(denied);
  CHECK_FALSE(denied->allowed);
  CHECK(denied->local == LocalDecision::kDenyCache);
  CHECK(handler);

  // A bucket the layer knows nothing of goes to the store, with the handler.
  const auto c = bucket("per_key", "carol", 2, 0.5);
  h.kept = {c};
  const std::size_t asked = h.store->calls.size();
  CHECK_FALSE(h.layer->decide_or_wait(h.kept, 1, handler));
  CHECK_FALSE(handler);  // taken
  REQUIRE(h.store->calls.size() == asked + 1);
  h.store->answer(true, {state(true, 1)});
  REQUIRE(h.loop.run_until([&] { return called == 1; }));
}

TEST_CASE("local layer: an idle worker's sweep empties the denial cache and says what it freed",
          "[ratelimit][local]") {
  test::Loop loop;
  MetricsShard metrics;
  std::int64_t now = 1'000'000;
  std::size_t freed = 0;
  auto store = std::make_shared<FakeStore>(loop.io);
  auto layer = std::make_shared<LocalLayer>(
      loop.io.get_executor(), store, metrics, LocalConfig{}, [&now] { return now; },
      [&freed](std::size_t bytes) { freed += bytes; });
  // Many distinct callers denied once each (a flood), then nothing.
  std::vector<std::vector<LimitDescriptor>> asked;
  for (int i = 0; i < 100; ++i)
    asked.push_back({bucket("per_caller", std::to_string(i).c_str(), 1, 0.001)});
  int answered = 0;
  for (auto& ds : asked) {
    layer->decide(ds, 1, [&answered](std::error_code, RateDecision) { ++answered; });
    store->answer(false, {state(false, 0, 1000)});
  }
  REQUIRE(loop.run_until([&] { return answered == 100; }));
  REQUIRE(layer->deny_cache().size() == 100);
  // The entries run out after 1 s (the cap); the sweep, with no request, drops them.
  now += DenyCache::kMaxEntryUs;
  REQUIRE(loop.run_until([&] { return layer->deny_cache().size() == 0; }, std::chrono::seconds(3)));
  CHECK(freed == 100 * DenyCache::kEntryBytes);
  layer->drain(nullptr);
}

TEST_CASE("local layer: a denial answered before a refund is not remembered",
          "[ratelimit][local]") {
  Harness h;
  const auto b = bucket("per_key", "alice", 2, 0.5);
  CHECK_FALSE(h.decide({b}));  // asked: the bucket is empty
  h.now += 1'000;
  h.layer->refund({BucketRefund{b, 2}}, nullptr);  // a settlement gives 2 back
  h.store->answer(false, {state(false, 0, 2.0)});  // the answer from before it
  CHECK_FALSE(h.await().allowed);
  h.now += 1'000;
  CHECK_FALSE(h.decide({b}));  // not denied from the cache: the store is asked
  CHECK(h.store->calls.size() == 1);
  h.store->answer(false, {state(false, 0, 2.0)});  // a denial from after the refund
  h.await();
  h.now += 1'000;
  auto d = h.decide({b});  // this one is remembered
  REQUIRE(d);
  CHECK(d->local == LocalDecision::kDenyCache);
}

TEST_CASE("local layer: without the denial cache every request asks the store",
          "[ratelimit][local]") {
  Harness h(false);
  const auto b = bucket("per_key", "alice", 2, 0.5);
  h.decide({b});
  h.store->answer(false, {state(false, 0.5, 1.0)});
  h.await();
  CHECK_FALSE(h.decide({b}));
  CHECK(h.store->calls.size() == 1);
}

TEST_CASE("local layer: one denied bucket denies a request; the others report what is known",
          "[ratelimit][local]") {
  Harness h;
  const auto per_key = bucket("per_key", "alice", 2, 0.5);
  const auto global = bucket("global", "all", 100, 10);
  h.decide({per_key, global});
  h.store->answer(false, {state(false, 0, 2.0), state(true, 50)});
  h.await();
  const auto route = bucket("route", "r", 30, 1);
  auto d = h.decide({global, per_key, route});
  REQUIRE(d);
  CHECK_FALSE(d->allowed);
  CHECK(d->limits[0].sufficient);  // as the store reported it with the denial
  CHECK(d->limits[0].remaining == 50);
  CHECK_FALSE(d->limits[1].sufficient);
  CHECK(d->limits[1].seconds_to_cost == Approx(2.0));
  CHECK(d->limits[2].sufficient);  // never reported: at its capacity
  CHECK(d->limits[2].remaining == 30);
}

TEST_CASE("local layer: a hot leased bucket asks for a lease, then spends it locally",
          "[ratelimit][local][lease]") {
  Harness h;
  const auto g = bucket("global", "all", 1000, 100, 50);
  // 20 requests in 100 ms: 200/s, a 40-token lease once measured.
  for (int i = 0; i < 20; ++i) {
    h.decide({g});
    REQUIRE(h.store->calls.back().descriptors[0].lease_want == 0);
    h.store->answer(true, {state(true, 900)});
    h.await();
    h.now += 5'000;
  }
  h.decide({g});
  REQUIRE(h.store->calls.size() == 1);
  CHECK(h.store->calls[0].descriptors[0].lease_want == 40);
  h.store->answer(true, {state(true, 860, 0, 40)});
  CHECK(h.await().allowed);
  CHECK(h.layer->leases().held_tokens() == 40);

  // Spent locally; below a quarter of the lease (10), one top-up goes out in
  // the background: a call that decides no request (cost 0).
  for (int i = 0; i < 40; ++i) {
    auto d = h.decide({g});
    REQUIRE(d);
    CHECK(d->allowed);
    CHECK(d->local == LocalDecision::kLease);
    CHECK(h.store->calls.size() == (i < 30 ? 0u : 1u));
  }
  REQUIRE(h.store->calls.size() == 1);
  CHECK(h.store->calls[0].cost == 0);
  CHECK(h.store->calls[0].descriptors[0].lease_want == 31);
  CHECK_FALSE(h.decide({g}));  // spent, and the top-up not back: this one waits for it
  CHECK(h.store->calls.size() == 1);
  h.store->answer(true, {state(true, 800, 0, 31)});  // the top-up
  CHECK(h.await().local == LocalDecision::kLease);
  CHECK(h.layer->leases().held_tokens() == 30);
  auto d = h.decide({g});
  REQUIRE(d);
  CHECK(d->local == LocalDecision::kLease);
}

TEST_CASE(
    "local layer: a request's other limits still go to the store; a denial puts the "
    "leased tokens back",
    "[ratelimit][local][lease]") {
  Harness h;
  const auto g = bucket("global", "all", 1000, 100, 50);
  const auto k = bucket("per_key", "alice", 5, 1);
  h.decide({g, k});
  h.store->answer(true, {state(true, 900), state(true, 4)});
  h.await();
  warm_lease(h, g);
  const double held = h.layer->leases().held_tokens();
  REQUIRE(held >= 2);
  h.decide({g, k});
  REQUIRE(h.store->calls.size() == 1);
  REQUIRE(h.store->calls[0].descriptors.size() == 1);  // only per_key
  CHECK(h.store->calls[0].descriptors[0].limit == "per_key");
  CHECK(h.layer->leases().held_tokens() == held - 1);
  h.store->answer(false, {state(false, 0.2, 0.8)});
  auto d = h.await();
  CHECK_FALSE(d.allowed);
  REQUIRE(d.limits.size() == 2);
  CHECK(d.limits[0].sufficient);  // global, from the lease
  CHECK_FALSE(d.limits[1].sufficient);
  CHECK(h.layer->leases().held_tokens() == held);  // put back
}

TEST_CASE("local layer: leases are given back on expiry, on reload and on drain",
          "[ratelimit][local][lease]") {
  Harness h;
  const auto g = bucket("global", "all", 1000, 100, 50);
  warm_lease(h, g);
  const double held = h.layer->leases().held_tokens();
  REQUIRE(held > 0);
  SECTION("expiry: the sweep refunds the rest") {
    h.now += LeaseTable::kMaxLifetimeUs;
    REQUIRE(h.loop.run_until([&] { return !h.store->refunds.empty(); }));
    CHECK(h.store->refunds[0].tokens == held);
    CHECK(h.layer->leases().held_tokens() == 0);
  }
  SECTION("reload") {
    h.layer->reconfigure(LocalConfig{});
    REQUIRE(h.store->refunds.size() == 1);
    CHECK(h.store->refunds[0].tokens == held);
  }
  SECTION("drain: done once the refund is answered, and later requests go to the store") {
    bool done = false;
    h.layer->drain([&done] { done = true; });
    REQUIRE(h.loop.run_until([&] { return done; }));
    REQUIRE(h.store->refunds.size() == 1);
    CHECK(h.store->refunds[0].tokens == held);
    CHECK_FALSE(h.decide({g}));
    CHECK(h.store->calls.back().descriptors[0].lease_want == 0);
  }
}

TEST_CASE("local layer: a reload empties the denial cache", "[ratelimit][local]") {
  Harness h;
  const auto b = bucket("per_key", "alice", 2, 0.5);
  h.decide({b});
  h.store->answer(false, {state(false, 0.5, 1.0)});
  h.await();
  REQUIRE(h.decide({b}));
  h.layer->reconfigure(LocalConfig{});
  CHECK_FALSE(h.decide({b}));
  CHECK(h.store->calls.size() == 1);
}

TEST_CASE("local layer: a lease granted after a reload emptied the table goes back",
          "[ratelimit][local][lease]") {
  Harness h;
  const auto g = bucket("global", "all", 1000, 100, 50);
  warm_lease(h, g);
  const double want = spend_until_top_up(h, g);
  REQUIRE(want > 0);
  h.layer->reconfigure(LocalConfig{});  // the table is emptied while the call is out
  const auto refunded_before = h.store->refunds.size();
  h.store->answer(true, {state(true, 800, 0, want)});
  REQUIRE(h.loop.run_until([&] { return h.store->refunds.size() == refunded_before + 1; }));
  CHECK(h.store->refunds.back().tokens == want);
  CHECK(h.layer->leases().held_tokens() == 0);
}

TEST_CASE("local layer: the drain waits for a lease call in flight and gives its lease back",
          "[ratelimit][local][lease]") {
  Harness h;
  const auto g = bucket("global", "all", 1000, 100, 50);
  warm_lease(h, g);
  const double want = spend_until_top_up(h, g);
  const double held = h.layer->leases().held_tokens();
  bool done = false;
  h.layer->drain([&done] { done = true; });
  CHECK_FALSE(h.loop.run_until([&] { return done; }, std::chrono::milliseconds(30)));
  h.store->answer(true, {state(true, 800, 0, want)});
  REQUIRE(h.loop.run_until([&] { return done; }));
  double refunded = 0;
  for (const auto& r : h.store->refunds) refunded += r.tokens;
  CHECK(refunded == held + want);
}

TEST_CASE(
    "local layer: leased tokens of a denied request go back to Redis when a reload took "
    "the lease meanwhile",
    "[ratelimit][local][lease]") {
  Harness h;
  const auto g = bucket("global", "all", 1000, 100, 50);
  const auto k = bucket("per_key", "alice", 5, 1);
  warm_lease(h, g);
  const double held = h.layer->leases().held_tokens();
  REQUIRE(held >= 1);
  CHECK_FALSE(h.decide({g, k}));  // g from the lease, k asked
  h.layer->reconfigure(LocalConfig{});
  REQUIRE(h.store->refunds.size() == 1);
  CHECK(h.store->refunds[0].tokens == held - 1);
  h.store->answer(false, {state(false, 0.2, 0.8)});
  CHECK_FALSE(h.await().allowed);
  REQUIRE(h.store->refunds.size() == 2);
  CHECK(h.store->refunds[1].tokens == 1);  // the denied request's token
}

TEST_CASE("local layer: requests that find the lease spent wait for the top-up on its way",
          "[ratelimit][local][lease]") {
  Harness h;
  const auto g = bucket("global", "all", 1000, 100, 50);
  warm_lease(h, g);
  const double want = spend_until_top_up(h, g);
  while (h.layer->leases().held_tokens() >= 1) REQUIRE(h.decide({g}));
  // Three requests now: no call of their own, they wait.
  std::vector<std::vector<LimitDescriptor>> kept(3, std::vector<LimitDescriptor>{g});
  std::vector<RateDecision> answers;
  for (auto& ds : kept) {
    h.layer->decide(ds, 1, [&answers](std::error_code ec, RateDecision d) {
      REQUIRE_FALSE(ec);
      answers.push_back(std::move(d));
    });
  }
  CHECK_FALSE(h.loop.run_until([&] { return !answers.empty(); }, std::chrono::milliseconds(20)));
  CHECK(h.store->calls.size() == 1);
  SECTION("the top-up arrives: they are served from it") {
    h.store->answer(true, {state(true, 800, 0, want)});
    REQUIRE(h.loop.run_until([&] { return answers.size() == 3; }));
    for (const auto& d : answers) {
      CHECK(d.allowed);
      CHECK(d.local == LocalDecision::kLease);
    }
    CHECK(h.store->calls.empty());
  }
  SECTION("nothing is granted: they ask Redis, each at once") {
    h.store->answer(true, {state(true, 0.5)});
    REQUIRE(h.loop.run_until([&] { return h.store->calls.size() == 3; }));
    for (int i = 0; i < 3; ++i) h.store->answer(true, {state(true, 0.5)});
    REQUIRE(h.loop.run_until([&] { return answers.size() == 3; }));
  }
}

}  // namespace local_layer_test
