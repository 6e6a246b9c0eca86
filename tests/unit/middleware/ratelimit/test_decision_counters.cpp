#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <tuple>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/decision_counters.hpp"

namespace sluice {
namespace {

double series(MetricsShard& shard, std::string_view route, std::string_view limit,
              LimitVerdict verdict) {
  return shard.value_ref(
      "sluice_ratelimit_decisions_total",
      scratch_labels({{"route", route}, {"limit", limit}, {"decision", verdict_label(verdict)}}));
}

}  // namespace

TEST_CASE("decision counters: each route, limit and verdict its own series, however they collide",
          "[decision_counters]") {
  MetricsShard shard;
  DecisionCounters counters(shard);
  const int routes[3] = {};
  const LimitVerdict verdicts[] = {LimitVerdict::kAllowed, LimitVerdict::kLimited,
                                   LimitVerdict::kShadowLimited, LimitVerdict::kDelayed};
  // Far more keys than the table has slots, counted in an interleaved order
  // several times over: every slot is taken from another key again and again.
  std::map<std::tuple<std::string, std::string, LimitVerdict>, int> expected;
  for (int round = 0; round < 3; ++round) {
    for (int r = 0; r < 3; ++r) {
      for (std::size_t i = 0; i < 12; ++i) {
        for (const LimitVerdict v : verdicts) {
          const std::string route = "route-" + std::to_string(r);
          const std::string limit = "a-limit-with-a-long-name-" + std::to_string(i);
          counters.count(&routes[r], i, route, limit, v);
          ++expected[{route, limit, v}];
        }
      }
    }
  }
  for (const auto& [key, count] : expected) {
    const auto& [route, limit, v] = key;
    CHECK(series(shard, route, limit, v) == count);
  }
}

TEST_CASE("decision counters: another route at the same address counts under its own name",
          "[decision_counters]") {
  MetricsShard shard;
  DecisionCounters counters(shard);
  const int place = 0;
  counters.count(&place, 0, "orders", "per-ip", LimitVerdict::kAllowed);
  counters.count(&place, 0, "orders", "per-ip", LimitVerdict::kAllowed);
  // A reload freed the route and put another one where it was.
  counters.count(&place, 0, "billing", "per-ip", LimitVerdict::kAllowed);
  counters.count(&place, 0, "billing", "per-key", LimitVerdict::kAllowed);
  CHECK(series(shard, "orders", "per-ip", LimitVerdict::kAllowed) == 2);
  CHECK(series(shard, "billing", "per-ip", LimitVerdict::kAllowed) == 1);
  CHECK(series(shard, "billing", "per-key", LimitVerdict::kAllowed) == 1);
}

}  // namespace sluice
