// The series a SeriesCache keeps are the shard's own: what add() would have
// counted under the same labels, escaped values and all.
#include <catch2/catch.hpp>

#include <string>

#include "gateway/metrics.hpp"
#include "gateway/series_cache.hpp"

using namespace sluice;

TEST_CASE("series cache: one label and two, each value pair its own series", "[series_cache]") {
  MetricsShard shard;
  SeriesCache one(shard, "sluice_test_one_total", "result");
  SeriesCache two(shard, "sluice_test_two_total", "route", "result");
  one.add("ok");
  one.add("ok", 2);
  one.add("error");
  two.add("a", "bc");
  two.add("ab", "c", 5);  // the same characters split elsewhere: another series
  two.add("q\"x", "ok");  // a value that needs escaping
  two.get("a", "bc") += 1;

  CHECK(shard.value_ref("sluice_test_one_total", label("result", "ok")) == 3);
  CHECK(shard.value_ref("sluice_test_one_total", label("result", "error")) == 1);
  CHECK(shard.value_ref("sluice_test_two_total", labels("route", "a", "result", "bc")) == 2);
  CHECK(shard.value_ref("sluice_test_two_total", labels("route", "ab", "result", "c")) == 5);
  CHECK(shard.value_ref("sluice_test_two_total", labels("route", "q\"x", "result", "ok")) == 1);
  CHECK(one.size() == 2);
  CHECK(two.size() == 3);

  // A series the shard already had (declared at startup) is the one counted.
  shard.add("sluice_test_one_total", label("result", "seeded"), 7);
  SeriesCache again(shard, "sluice_test_one_total", "result");
  again.add("seeded");
  CHECK(shard.value_ref("sluice_test_one_total", label("result", "seeded")) == 8);
  // And a gauge set through it is what the shard shows.
  SeriesCache gauge(shard, "sluice_test_in_flight", "limit");
  gauge.get("l") += 2;
  gauge.get("l") -= 1;
  CHECK(shard.value_ref("sluice_test_in_flight", label("limit", "l")) == 1);
}
