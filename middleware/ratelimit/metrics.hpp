// The metric families the rate limiter counts (decisions, the local layer,
// its Redis connections, the fleet, the consumer store, the audit and the
// admin endpoints it serves), declared here by name, type, help and merge
// rule and registered with the gateway's metrics at startup.
#pragma once

#include <span>

#include "gateway/metrics.hpp"

namespace sluice {

std::span<const MetricFamily> rate_limit_metric_families();

}  // namespace sluice
