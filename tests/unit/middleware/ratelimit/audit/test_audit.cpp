// The denial audit's pure parts: the bounded per-worker denial counts (exact
// until a flood of distinct callers, then bounded), the deciding limit and
// decision name the access log shows, and the top endpoint's query (the
// view's Redis commands: test_top_plan.cpp).
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "middleware/ratelimit/audit/decision_fields.hpp"
#include "middleware/ratelimit/audit/denial_audit.hpp"
#include "middleware/ratelimit/audit/denial_counts.hpp"
#include "middleware/ratelimit/audit/top_endpoint.hpp"

using namespace sluice;

namespace audit_test {

std::map<std::string, std::uint64_t> totals(const std::vector<DenialCounts::Entry>& entries) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& e : entries) out[e.limit + "/" + e.caller] += e.count;
  return out;
}

TEST_CASE("denial counts: exact per limit and caller while they fit", "[audit]") {
  DenialCounts counts(8);
  for (int i = 0; i < 5; ++i) counts.add("a", "x");
  counts.add("a", "y");
  counts.add("b", "x");
  const auto sent = totals(counts.take());
  CHECK(sent == std::map<std::string, std::uint64_t>{{"a/x", 5}, {"a/y", 1}, {"b/x", 1}});
  CHECK(counts.empty());
  CHECK(counts.take().empty());
}

TEST_CASE("denial counts: a flood of distinct callers is bounded, a heavy caller stays exact",
          "[audit]") {
  constexpr std::size_t kCapacity = 64;
  DenialCounts counts(kCapacity);
  std::uint64_t heavy = 0;
  for (int i = 0; i < 100000; ++i) {
    counts.add("l", "flood-" + std::to_string(i));
    if (i % 10 == 0) {
      counts.add("l", "heavy");
      ++heavy;
    }
    CHECK(counts.held() <= kCapacity);
  }
  const auto entries = counts.take();
  CHECK(entries.size() <= 2 * kCapacity);
  CHECK(totals(entries)["l/heavy"] == heavy);
  std::uint64_t sent = 0;
  for (const auto& e : entries) sent += e.count;
  CHECK(sent + counts.dropped() == 100000 + heavy);  // nothing lost without being counted
  CHECK(counts.dropped() > 0);
}

TEST_CASE("denial counts: pairs set aside keep their exact counts", "[audit]") {
  DenialCounts counts(2);
  counts.add("l", "a");
  counts.add("l", "a");
  counts.add("l", "b");
  counts.add("l", "c");  // b (1) leaves, set aside
  counts.add("l", "b");  // c (1) leaves, set aside; b again
  const auto sent = totals(counts.take());
  CHECK(sent == std::map<std::string, std::uint64_t>{{"l/a", 2}, {"l/b", 2}, {"l/c", 1}});
  CHECK(counts.dropped() == 0);
}

LimitDescriptor limit(std::string name, double capacity, bool shadow = false) {
  LimitDescriptor d;
  d.limit = std::move(name);
  d.capacity = capacity;
  d.refill_per_second = 1;
  d.shadow = shadow;
  return d;
}

TEST_CASE("decision fields: the limit that denied, else the most restrictive", "[audit]") {
  const std::vector<LimitDescriptor> limits = {limit("wide", 100), limit("narrow", 10),
                                               limit("dry", 5, true)};
  RateDecision decision;
  decision.allowed = true;
  decision.limits = {LimitState{true, 50.7, 0, 1}, LimitState{true, 2.5, 0, 1},
                     LimitState{true, 4, 0, 1}};
  RateOutcome outcome = select_outcome(limits, decision);
  DecisionRecord record;
  record_decision(record, limits, decision, outcome, 1, false);
  CHECK(record.decision == "allowed");
  CHECK(record.limit == "narrow");
  CHECK(record.remaining == 2);  // floored, as the headers show it
  CHECK(record.cost == 1);

  // The shadow limit short: shadow_limited, and it is the one named.
  decision.limits[2].sufficient = false;
  decision.limits[2].remaining = 0;
  outcome = select_outcome(limits, decision);
  record = {};
  record_decision(record, limits, decision, outcome, 1, false);
  CHECK(record.decision == "shadow_limited");
  CHECK(record.limit == "dry");

  // The wide limit short (and the shadow one): limited by wide.
  decision.allowed = false;
  decision.limits[0] = LimitState{false, 0, 3, 9};
  outcome = select_outcome(limits, decision);
  record = {};
  record_decision(record, limits, decision, outcome, 1, false);
  CHECK(record.decision == "limited");
  CHECK(record.limit == "wide");

  // Decided by the local fallback.
  record = {};
  record_decision(record, limits, decision, outcome, 1, true);
  CHECK(record.decision == "fail_local");
  CHECK(record.limit == "wide");
}

TEST_CASE("decision fields: a denial names the caller, else the bucket's hash", "[audit]") {
  LimitDescriptor d = limit("l", 1);
  d.key_hash.fill(0xab);
  CHECK(denied_caller("consumer-7", d) == "consumer-7");
  CHECK(denied_caller("", d) == "abababababababababababababababab");
}

TEST_CASE("top query: defaults, bounds and unknown limits", "[audit]") {
  Config config;
  LimitConfig l;
  l.name = "per_key";
  config.limits.push_back(l);
  auto ok = parse_top_query("limit=per_key", config);
  REQUIRE(std::holds_alternative<TopQuery>(ok));
  CHECK(std::get<TopQuery>(ok).window_s == 60);
  CHECK(std::get<TopQuery>(ok).n == 20);
  ok = parse_top_query("limit=per_key&window_s=3600&n=1000", config);
  REQUIRE(std::holds_alternative<TopQuery>(ok));
  CHECK(std::get<TopQuery>(ok).window_s == 3600);
  for (const char* bad : {"", "limit=", "limit=other", "limit=per_key&n=0", "limit=per_key&n=1001",
                          "limit=per_key&n=99999999999999999999", "limit=per_key&window_s=-1",
                          "limit=per_key&window_s=3601", "limit=per_key&window_s=1.5",
                          "limit=per_key&n=+3", "limit=per_key&limit=per_key"}) {
    CAPTURE(bad);
    CHECK(std::holds_alternative<TopQueryError>(parse_top_query(bad, config)));
  }
}

}  // namespace audit_test
