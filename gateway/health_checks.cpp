#include "gateway/health_checks.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "upstream/health/health_checker.hpp"
#include "upstream/health/health_state.hpp"

namespace sluice {

struct HealthChecks::Entry {
  Entry(std::string upstream_in, HostPort server_in, const HealthCheckConfig& check_in)
      : upstream(std::move(upstream_in)),
        server(std::move(server_in)),
        address(server.to_string()),
        check(check_in),
        state(check.healthy_threshold, check.unhealthy_threshold) {}

  std::string upstream;
  HostPort server;
  std::string address;  // "host:port", as labels and logs show it
  HealthCheckConfig check;
  HealthState state;
  std::shared_ptr<ServerHealth> flag = std::make_shared<ServerHealth>();
  double ok_count = 0;
  double fail_count = 0;
  std::shared_ptr<const UpstreamTls> tls;  // the checker's (a reload builds a new one)
  UpstreamProtocol protocol = UpstreamProtocol::kHttp1;
  std::unique_ptr<HealthChecker> checker;
};

HealthChecks::HealthChecks(boost::asio::io_context& io) : io_(io) {}

HealthChecks::~HealthChecks() {
  stop();
}

std::shared_ptr<const UpstreamHealth> HealthChecks::apply(const Config& config) {
  decltype(entries_) next;
  auto health = std::make_shared<UpstreamHealth>();
  for (const auto& upstream : config.upstreams) {
    if (!upstream.health_check) continue;
    const auto& check = *upstream.health_check;
    for (const auto& server : upstream.servers) {
      std::pair<std::string, std::string> key{upstream.name, server.to_string()};
      if (next.count(key)) continue;  // listed twice: one checker
      auto old = entries_.find(key);
      std::unique_ptr<Entry> entry;
      if (old != entries_.end()) {
        entry = std::move(old->second);
        entries_.erase(old);
        entry->state.set_thresholds(check.healthy_threshold, check.unhealthy_threshold);
      } else {
        entry = std::make_unique<Entry>(upstream.name, server, check);
      }
      if (!entry->checker || entry->check != check || entry->protocol != upstream.protocol ||
          !UpstreamTls::same(entry->tls.get(), upstream.tls.get())) {
        entry->check = check;
        entry->tls = upstream.tls;
        entry->protocol = upstream.protocol;
        Entry* e = entry.get();
        entry->checker = std::make_unique<HealthChecker>(
            io_, server, check, upstream.tls, [this, e](const HealthCheckResult& result) {
              on_result(*e, result.ok, result.detail);
            },
            upstream.protocol);
        entry->checker->start();
      }
      health->add(upstream.name, server, entry->flag);
      next.emplace(std::move(key), std::move(entry));
    }
  }
  entries_ = std::move(next);  // servers no longer checked: their checkers stop
  apply_outliers(config, *health);
  return health;
}

// Every server under outlier detection gets a flag: a checked server's own
// (its outlier state beside its health), or one kept for it here.
void HealthChecks::apply_outliers(const Config& config, UpstreamHealth& health) {
  decltype(passive_) next;
  outliers_.clear();
  for (const auto& upstream : config.upstreams) {
    if (!upstream.outlier_detection) continue;
    for (const auto& server : upstream.servers) {
      auto flag = health.find(upstream.name, server);
      std::pair<std::string, std::string> key{upstream.name, server.to_string()};
      if (!flag) {
        if (auto it = next.find(key); it != next.end()) continue;  // listed twice
        const auto old = passive_.find(key);
        flag = old != passive_.end() ? old->second : std::make_shared<ServerHealth>();
        health.add(upstream.name, server, flag);
        next.emplace(key, flag);
      } else if (std::any_of(outliers_.begin(), outliers_.end(), [&](const Outlier& o) {
                   return o.flag == flag;
                 })) {
        continue;
      }
      outliers_.push_back({upstream.name, key.second, flag});
    }
  }
  passive_ = std::move(next);
}

void HealthChecks::stop() {
  for (auto& [key, entry] : entries_) {
    if (entry->checker) entry->checker->stop();
  }
}

void HealthChecks::on_result(Entry& entry, bool ok, const std::string& detail) {
  (ok ? entry.ok_count : entry.fail_count) += 1;
  switch (entry.state.record(ok)) {
    case HealthState::Change::kBecameUnhealthy:
      entry.flag->healthy.store(false, std::memory_order_relaxed);
      spdlog::warn("upstream {} server {} is unhealthy after {} failed health checks (last: {})",
                   entry.upstream, entry.address, entry.check.unhealthy_threshold, detail);
      break;
    case HealthState::Change::kBecameHealthy:
      entry.flag->healthy.store(true, std::memory_order_relaxed);
      spdlog::info("upstream {} server {} is healthy again after {} good health checks",
                   entry.upstream, entry.address, entry.check.healthy_threshold);
      break;
    case HealthState::Change::kNone:
      if (const auto now = steady_now_ns(); ok && entry.flag->outlier.ejected(now)) {
        // An ejected server that passes its check is back at once (as
        // Envoy does): the active checks and the outliers agree.
        entry.flag->outlier.forgive(now);
        spdlog::info("upstream {} server {}: back from its ejection after a good health check",
                     entry.upstream, entry.address);
      }
      if (!ok)
        spdlog::debug("upstream {} server {}: health check failed: {}", entry.upstream,
                      entry.address, detail);
      break;
  }
}

void HealthChecks::add_series(MetricsShard& into) const {
  for (const auto& [key, entry] : entries_) {
    const auto server = labels("upstream", entry->upstream, "server", entry->address);
    into.set("sluice_upstream_healthy", server, entry->state.healthy() ? 1 : 0);
    into.add("sluice_upstream_health_checks_total", server + "," + label("result", "ok"),
             entry->ok_count);
    into.add("sluice_upstream_health_checks_total", server + "," + label("result", "fail"),
             entry->fail_count);
  }
  const auto now = steady_now_ns();
  for (const auto& o : outliers_) {
    const auto server = labels("upstream", o.upstream, "server", o.address);
    const OutlierState& state = o.flag->outlier;
    into.add("sluice_upstream_server_requests_total", server,
             static_cast<double>(state.requests.load(std::memory_order_relaxed)));
    into.add("sluice_upstream_server_errors_total", server,
             static_cast<double>(state.errors.load(std::memory_order_relaxed)));
    into.add("sluice_upstream_ejections_total", server,
             static_cast<double>(state.ejections_total.load(std::memory_order_relaxed)));
    into.set("sluice_upstream_ejected", server, state.ejected(now) ? 1 : 0);
  }
}

nlohmann::json HealthChecks::readiness() const {
  if (entries_.empty()) return nullptr;
  auto upstreams = nlohmann::json::object();
  for (const auto& [key, entry] : entries_) {
    auto& upstream = upstreams[entry->upstream];
    if (upstream.is_null())
      upstream = {{"healthy_servers", 0}, {"servers", nlohmann::json::array()}};
    const bool healthy = entry->state.healthy();
    if (healthy) upstream["healthy_servers"] = upstream["healthy_servers"].get<int>() + 1;
    upstream["servers"].push_back({{"server", entry->address}, {"healthy", healthy}});
  }
  return upstreams;
}

}  // namespace sluice
