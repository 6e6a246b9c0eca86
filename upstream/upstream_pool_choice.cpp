// UpstreamPools: choosing a server for an attempt (the upstream's balance
// policy over the servers that can take it) and what an attempt's outcome
// does to outlier detection. The connections themselves: upstream_pool.cpp.
#include <algorithm>
#include <mutex>

#include <spdlog/spdlog.h>

#include "upstream/upstream_pool.hpp"

namespace sluice {

std::vector<UpstreamPools::ServerState*>& UpstreamPools::states_by_index(
    const UpstreamConfig& upstream) {
  auto& state = upstream_state(upstream);
  if (state.by_index_generation != upstream.generation ||
      state.by_index_servers != upstream.servers.data() ||
      state.by_index.size() != upstream.servers.size()) {
    state.by_index.clear();
    for (const auto& server : upstream.servers) {
      state.by_index.push_back(&server_state(upstream, server));
    }
    state.by_index_generation = upstream.generation;
    state.by_index_servers = upstream.servers.data();
  }
  return state.by_index;
}

std::optional<std::size_t> UpstreamPools::pick(const UpstreamConfig& upstream,
                                               const std::vector<std::size_t>& tried,
                                               std::optional<std::uint64_t> hash_key) {
  const std::size_t n = upstream.servers.size();
  if (n == 0) return std::nullopt;
  const auto& states = states_by_index(upstream);
  const auto now = Clock::now();
  const std::int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  pick_servers_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const ServerState& server = *states[i];
    pick_servers_[i] = {server.cooldown_until <= now && !server.unhealthy() &&
                            !(server.health && server.health->outlier.ejected(now_ns)) &&
                            std::find(tried.begin(), tried.end(), i) == tried.end(),
                        upstream.weight(i), server.slots->in_flight};
  }
  switch (upstream.balance) {
    case BalancePolicy::kRoundRobin:
      return pick_round_robin(pick_servers_, upstream_state(upstream).round_robin);
    case BalancePolicy::kLeastRequest:
      return pick_least_request(pick_servers_, random_);
    case BalancePolicy::kRandom:
      return pick_random(pick_servers_, random_);
    case BalancePolicy::kHash:
      // A request without the key is spread at random, by weight.
      if (!hash_key || !upstream.ring) return pick_random(pick_servers_, random_);
      return pick_hash(pick_servers_, *upstream.ring, *hash_key);
  }
  return std::nullopt;
}

void UpstreamPools::record_attempt(const UpstreamConfig& upstream, std::size_t server,
                                   AttemptResult result) {
  if (!upstream.outlier_detection) return;
  const OutlierConfig& config = *upstream.outlier_detection;
  const auto& states = states_by_index(upstream);
  if (server >= states.size() || !states[server]->health) return;
  OutlierState& outlier = states[server]->health->outlier;
  if (!outlier.record(config, result)) return;
  // Decided under one process-wide lock (taken only when a server is due):
  // two workers crossing the threshold together eject it once, and never
  // two servers past the cap. At most max_ejection_percent of the servers
  // out at once (at least one), and never the last one that can take
  // requests: a fleet-wide failure must not empty the upstream.
  static std::mutex ejecting;
  const std::lock_guard lock(ejecting);
  const auto now = steady_now_ns();
  if (outlier.ejected(now)) return;  // ejected meanwhile: late reports of the same failure
  std::size_t ejected = 0;
  std::size_t out = 0;  // ejected or failing active checks
  for (const ServerState* s : states) {
    const bool is_ejected = s->health && s->health->outlier.ejected(now);
    ejected += is_ejected;
    out += is_ejected || s->unhealthy();
  }
  const std::size_t allowed =
      std::max<std::size_t>(1, states.size() * config.max_ejection_percent / 100);
  if (ejected >= allowed || out + 1 >= states.size()) {
    outlier.restart_runs();  // stays in; its run starts again
    return;
  }
  const auto length = outlier.eject(config, now);
  spdlog::warn("upstream {} server {}: ejected for {} ms after errors in a row", upstream.name,
               upstream.servers[server].to_string(), length.count());
}

}  // namespace sluice
