// Test helper: what a scrape would see of one shard.
#pragma once

#include "gateway/metrics.hpp"

namespace sluice::test {

inline MetricsSnapshot snapshot_of(const MetricsShard& shard) {
  MetricsSnapshot s;
  shard.merge_into(s);
  return s;
}

}  // namespace sluice::test
