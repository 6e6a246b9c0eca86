// The outcome of a decision for a request: allowed, limited or delayed, each
// limit's counted verdict with shadow and enforced limits in every
// combination, what the client is shown, and what a request that leaves while
// waiting gives back.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "middleware/ratelimit/outcome.hpp"

using namespace sluice;

namespace outcome_test {

LimitDescriptor limit(std::string name, bool shadow, double max_wait = 0) {
  LimitDescriptor d;
  d.limit = std::move(name);
  d.capacity = 10;
  d.refill_per_second = 1;
  d.shadow = shadow;
  d.max_wait_seconds = max_wait;
  return d;
}

LimitState ok(double remaining = 5) {
  return LimitState{true, remaining, 0, 5};
}
LimitState short_of(double to_cost) {
  return LimitState{false, 0, to_cost, 10};
}
LimitState reserved(double wait) {
  LimitState s{false, -wait, wait, 10 + wait};
  s.wait_seconds = wait;
  return s;
}

RateDecision decided(bool allowed, sluice::LimitStates limits, double delay = 0) {
  RateDecision d;
  d.allowed = allowed;
  d.limits = std::move(limits);
  d.delay_seconds = delay;
  return d;
}

using V = LimitVerdict;
using K = RateOutcome::Kind;


TEST_CASE("verdict labels are the metric's decision values", "[ratelimit][outcome]") {
  CHECK(verdict_label(V::kAllowed) == "allowed");
  CHECK(verdict_label(V::kLimited) == "limited");
  CHECK(verdict_label(V::kShadowLimited) == "shadow_limited");
  CHECK(verdict_label(V::kDelayed) == "delayed");
}

TEST_CASE("enforced limits only: allowed or limited", "[ratelimit][outcome]") {
  const std::vector<LimitDescriptor> limits = {limit("a", false), limit("b", false)};
  auto o = select_outcome(limits, decided(true, {ok(), ok()}));
  CHECK(o.kind == K::kAllowed);
  CHECK(o.delay_seconds == 0);
  CHECK(o.limits == LimitVerdicts{V::kAllowed, V::kAllowed});

  o = select_outcome(limits, decided(false, {ok(), short_of(2)}));
  CHECK(o.kind == K::kLimited);
  CHECK(o.limits == LimitVerdicts{V::kAllowed, V::kLimited});

  o = select_outcome(limits, decided(false, {short_of(1), short_of(2)}));
  CHECK(o.limits == LimitVerdicts{V::kLimited, V::kLimited});
}

TEST_CASE("a shadow limit short of tokens never denies, whatever the request's fate",
          "[ratelimit][outcome]") {
  const std::vector<LimitDescriptor> limits = {limit("enforced", false), limit("dry", true)};
  SECTION("enforced sufficient, shadow short: allowed, counted shadow_limited") {
    const auto o = select_outcome(limits, decided(true, {ok(), short_of(3)}));
    CHECK(o.kind == K::kAllowed);
    CHECK(o.limits == LimitVerdicts{V::kAllowed, V::kShadowLimited});
  }
  SECTION("both short: limited by the enforced one, the shadow one still shadow_limited") {
    const auto o = select_outcome(limits, decided(false, {short_of(1), short_of(3)}));
    CHECK(o.kind == K::kLimited);
    CHECK(o.limits == LimitVerdicts{V::kLimited, V::kShadowLimited});
  }
  SECTION("enforced short, shadow sufficient") {
    const auto o = select_outcome(limits, decided(false, {short_of(1), ok()}));
    CHECK(o.kind == K::kLimited);
    CHECK(o.limits == LimitVerdicts{V::kLimited, V::kAllowed});
  }
  SECTION("both sufficient") {
    const auto o = select_outcome(limits, decided(true, {ok(), ok()}));
    CHECK(o.kind == K::kAllowed);
    CHECK(o.limits == LimitVerdicts{V::kAllowed, V::kAllowed});
  }
  SECTION("a store that refused for the shadow limit alone: the request goes") {
    const auto o = select_outcome(limits, decided(false, {ok(), short_of(3)}));
    CHECK(o.kind == K::kAllowed);
    CHECK(o.limits == LimitVerdicts{V::kAllowed, V::kShadowLimited});
  }
  SECTION("shadow limits only") {
    const std::vector<LimitDescriptor> dry = {limit("dry", true)};
    const auto o = select_outcome(dry, decided(true, {short_of(3)}));
    CHECK(o.kind == K::kAllowed);
    CHECK(o.limits == LimitVerdicts{V::kShadowLimited});
  }
}

TEST_CASE("a reservation delays the request by the longest wait", "[ratelimit][outcome]") {
  const std::vector<LimitDescriptor> limits = {limit("a", false, 2), limit("b", false, 2)};
  auto o = select_outcome(limits, decided(true, {reserved(0.5), reserved(1.25)}, 1.25));
  CHECK(o.kind == K::kDelayed);
  CHECK(o.delay_seconds == 1.25);
  CHECK(o.limits == LimitVerdicts{V::kDelayed, V::kDelayed});

  o = select_outcome(limits, decided(true, {ok(), reserved(0.5)}, 0.5));
  CHECK(o.kind == K::kDelayed);
  CHECK(o.delay_seconds == 0.5);
  CHECK(o.limits == LimitVerdicts{V::kAllowed, V::kDelayed});

  SECTION("the wait is taken from the limits when the decision does not name it") {
    o = select_outcome(limits, decided(true, {ok(), reserved(0.75)}, 0));
    CHECK(o.kind == K::kDelayed);
    CHECK(o.delay_seconds == 0.75);
  }
  SECTION("never longer than the limits' max wait") {
    o = select_outcome(limits, decided(true, {ok(), reserved(7)}, 7));
    CHECK(o.delay_seconds == 2);
  }
  SECTION("a wait no limit accepts is no wait") {
    const std::vector<LimitDescriptor> no_wait = {limit("a", false)};
    o = select_outcome(no_wait, decided(true, {ok()}, 0.5));
    CHECK(o.kind == K::kAllowed);
  }
  SECTION("refused beyond the wait: the reservable limit counts as limited") {
    o = select_outcome(limits, decided(false, {reserved(0.5), short_of(9)}));
    CHECK(o.kind == K::kLimited);
    CHECK(o.delay_seconds == 0);
    CHECK(o.limits == LimitVerdicts{V::kLimited, V::kLimited});
  }
}

TEST_CASE("shadow and delay together", "[ratelimit][outcome]") {
  // A shadow limit never waits (the middleware gives it no max wait).
  const std::vector<LimitDescriptor> limits = {limit("enforced", false, 1), limit("dry", true)};
  auto o = select_outcome(limits, decided(true, {reserved(0.4), short_of(3)}, 0.4));
  CHECK(o.kind == K::kDelayed);
  CHECK(o.delay_seconds == Approx(0.4));
  CHECK(o.limits == LimitVerdicts{V::kDelayed, V::kShadowLimited});

  o = select_outcome(limits, decided(true, {reserved(0.4), ok()}, 0.4));
  CHECK(o.limits == LimitVerdicts{V::kDelayed, V::kAllowed});
}

TEST_CASE("the client is shown the enforced limits only", "[ratelimit][outcome]") {
  const std::vector<LimitDescriptor> limits = {limit("dry", true), limit("enforced", false),
                                               limit("dry2", true)};
  auto view = client_view(limits, decided(false, {short_of(3), short_of(1), ok()}));
  REQUIRE(view.filtered);
  REQUIRE(view.limits.size() == 1);
  CHECK(view.limits[0].limit == "enforced");
  REQUIRE(view.decision.limits.size() == 1);
  CHECK(view.decision.limits[0].seconds_to_cost == 1);
  CHECK_FALSE(view.decision.allowed);

  SECTION("refused for a shadow limit alone: shown as admitted") {
    view = client_view(limits, decided(false, {short_of(3), ok(), ok()}));
    CHECK(view.decision.allowed);
  }
  SECTION("no shadow limit: nothing to filter") {
    const std::vector<LimitDescriptor> enforced = {limit("a", false)};
    view = client_view(enforced, decided(true, {ok()}));
    CHECK_FALSE(view.filtered);
    CHECK(view.limits.empty());
  }
  SECTION("shadow limits only: nothing shown") {
    const std::vector<LimitDescriptor> dry = {limit("dry", true)};
    view = client_view(dry, decided(true, {short_of(2)}));
    CHECK(view.filtered);
    CHECK(view.limits.empty());
    CHECK(view.decision.allowed);
  }
}

TEST_CASE("a request that leaves gives back what it debited", "[ratelimit][outcome]") {
  const std::vector<LimitDescriptor> limits = {limit("a", false, 1), limit("dry", true),
                                               limit("dry_ok", true), limit("b", false, 1)};
  const auto refunds =
      debited_buckets(limits, decided(true, {reserved(0.5), short_of(2), ok(), ok()}, 0.5), 3);
  REQUIRE(refunds.size() == 3);
  CHECK(refunds[0].bucket.limit == "a");
  CHECK(refunds[1].bucket.limit == "dry_ok");  // a short shadow bucket was not debited
  CHECK(refunds[2].bucket.limit == "b");
  for (const auto& refund : refunds) CHECK(refund.tokens == 3);
  CHECK(debited_buckets(limits, RateDecision{}, 3).empty());  // nothing decided, nothing back
}

}  // namespace outcome_test
