// The metric families the rate limiter counts (decisions, the local layer,
// its Redis connections, the fleet, the consumer store, the audit and the
// admin endpoints it serves), declared here by name, type, help and merge
// rule and registered with the gateway's metrics at startup; and the zero
// series a config makes possible, seeded at startup and on reload.
#pragma once

#include <span>
#include <string_view>

#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"
#include "middleware/ratelimit/descriptors.hpp"

namespace sluice {

std::span<const MetricFamily> rate_limit_metric_families();

// A zero series for every label combination the rate-limit middleware and the
// Redis limiter can count under `config`: decisions per route, limit and
// decision (shadow_limited for shadow limits, delayed on delay routes); the
// delay histogram and abandoned waits of delay routes; fail-open, fail-closed or fail-local per
// route (by its failure mode); missing key sources and refusal reasons the route's limits make
// possible; Redis errors by kind; the decision latency histogram. Startup and reload only.
void seed_rate_limit_metrics(const Config& config, MetricsShard& metrics);

// The reason label of a refused key source (sluice_ratelimit_rejected_total).
std::string_view refusal_reason_name(KeyRefusal::Reason reason);

// What counts a request the limiter could not decide, by the route's failure mode.
std::string_view fail_counter(FailureMode mode);

}  // namespace sluice
