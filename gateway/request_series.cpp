#include "gateway/request_series.hpp"

#include <cstdio>
#include <functional>

namespace sluice {
namespace {

// The index of `item` in `items`, or items.size() if it is not one of them.
template <class T>
std::size_t index_in(const std::vector<T>& items, const T* item) {
  const std::less<const T*> before;
  if (!item || before(item, items.data()) || !before(item, items.data() + items.size())) {
    return items.size();
  }
  return static_cast<std::size_t>(item - items.data());
}

std::string_view status_text(unsigned status, char (&text)[8]) {
  const int len = std::snprintf(text, sizeof text, "%u", status);
  return {text, static_cast<std::size_t>(len)};
}

}  // namespace

void RequestSeries::use(const std::shared_ptr<const Config>& config) {
  if (config == config_) return;
  config_ = config;
  routes_.assign(config->routes.size() + 1, Route{});
  upstreams_.assign(config->upstreams.size(), Upstream{});
}

void RequestSeries::count_request(const std::shared_ptr<const Config>& config,
                                  const RouteConfig* route, unsigned status, double seconds) {
  use(config);
  const std::string_view name = route ? std::string_view{route->name} : std::string_view{};
  char text[8];
  const std::size_t index = route ? index_in(config->routes, route) : config->routes.size();
  if (route && index == config->routes.size()) {
    // Not a route of this config (never expected): counted the slow way.
    shard_.add("sluice_http_requests_total",
               scratch_labels({{"route", name}, {"code", status_text(status, text)}}));
    shard_.observe("sluice_http_request_duration_seconds", scratch_labels({{"route", name}}),
                   seconds);
    return;
  }
  Route& entry = routes_[index];  // the last entry: no route matched
  if (!entry.duration) {
    entry.duration = &shard_.histogram_ref("sluice_http_request_duration_seconds",
                                           scratch_labels({{"route", name}}));
  }
  entry.duration->observe(seconds);
  for (auto& code : entry.codes) {
    if (code.count && code.status == status) {
      *code.count += 1;
      return;
    }
  }
  double& count = shard_.value_ref(
      "sluice_http_requests_total",
      scratch_labels({{"route", name}, {"code", status_text(status, text)}}));
  count += 1;
  entry.codes[entry.next_slot] = Code{status, &count};
  entry.next_slot = (entry.next_slot + 1) % entry.codes.size();
}

void RequestSeries::count_upstream(const std::shared_ptr<const Config>& config,
                                   const UpstreamConfig& upstream, UpstreamOutcome outcome) {
  use(config);
  const auto labels = [&] {
    return scratch_labels({{"upstream", upstream.name}, {"outcome", outcome_label(outcome)}});
  };
  const std::size_t index = index_in(config->upstreams, &upstream);
  if (outcome != UpstreamOutcome::kOk || index == config->upstreams.size()) {
    shard_.add("sluice_upstream_requests_total", labels());
    return;
  }
  Upstream& entry = upstreams_[index];
  if (!entry.ok) entry.ok = &shard_.value_ref("sluice_upstream_requests_total", labels());
  *entry.ok += 1;
}

}  // namespace sluice
