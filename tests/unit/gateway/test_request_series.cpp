// RequestSeries: the per-exchange counters resolved once per route and config
// must count exactly what the label-by-label path counts.
#include <catch2/catch.hpp>

#include <memory>

#include "gateway/config/load.hpp"
#include "gateway/metrics.hpp"
#include "gateway/request_series.hpp"
#include "support/metrics_snapshot.hpp"

using namespace sluice;
using sluice::test::snapshot_of;

namespace {

std::shared_ptr<const Config> config_with(const char* routes) {
  const std::string text = std::string(R"(
upstreams:
  u: { servers: ["127.0.0.1:9"] }
  v: { servers: ["127.0.0.1:10"] }
routes:
)") + routes;
  auto result = parse_config(text, "t.yaml");
  REQUIRE(result.config);
  return result.config;
}

double requests(const MetricsSnapshot& s, std::string_view route, std::string_view code) {
  return s.value("sluice_http_requests_total", labels("route", route, "code", code));
}

}  // namespace

TEST_CASE("request series count by route and code, more codes than cached slots",
          "[metrics]") {
  auto config = config_with(R"(
  - { name: a, match: { path_prefix: "/a" }, upstream: u }
  - { name: b, match: { path_prefix: "/" }, upstream: v }
)");
  MetricsShard shard;
  RequestSeries series(shard);
  const RouteConfig* a = &config->routes[0];
  const RouteConfig* b = &config->routes[1];
  for (int round = 0; round < 3; ++round) {
    for (unsigned status : {200u, 201u, 404u, 429u, 500u, 502u}) {
      series.count_request(config, a, status, 0.001);
    }
    series.count_request(config, b, 200, 0.002);
    series.count_request(config, nullptr, 400, 0.0);
  }
  const auto s = snapshot_of(shard);
  for (const char* code : {"200", "201", "404", "429", "500", "502"}) {
    CHECK(requests(s, "a", code) == 3);
  }
  CHECK(requests(s, "b", "200") == 3);
  CHECK(requests(s, "", "400") == 3);
  CHECK_FALSE(s.has("sluice_http_requests_total", labels("route", "b", "code", "404")));
  const auto text = s.render();
  CHECK(text.find("sluice_http_request_duration_seconds_count{route=\"a\"} 18\n") !=
        std::string::npos);
  CHECK(text.find("sluice_http_request_duration_seconds_count{route=\"b\"} 3\n") !=
        std::string::npos);
  CHECK(text.find("sluice_http_request_duration_seconds_count{route=\"\"} 3\n") !=
        std::string::npos);
}

TEST_CASE("request series follow a new config by route name, not position", "[metrics]") {
  auto before = config_with(R"(
  - { name: a, match: { path_prefix: "/a" }, upstream: u }
  - { name: b, match: { path_prefix: "/" }, upstream: v }
)");
  auto after = config_with(R"(
  - { name: b, match: { path_prefix: "/" }, upstream: v }
)");
  MetricsShard shard;
  RequestSeries series(shard);
  series.count_request(before, &before->routes[0], 200, 0.0);
  series.count_upstream(before, before->upstreams[0], UpstreamOutcome::kOk);
  series.count_request(after, &after->routes[0], 200, 0.0);
  series.count_upstream(after, after->upstreams[1], UpstreamOutcome::kOk);
  // A session still on the old config after a reload.
  series.count_request(before, &before->routes[1], 200, 0.0);
  const auto s = snapshot_of(shard);
  CHECK(requests(s, "a", "200") == 1);
  CHECK(requests(s, "b", "200") == 2);
  CHECK(s.value("sluice_upstream_requests_total", labels("upstream", "u", "outcome", "ok")) == 1);
  CHECK(s.value("sluice_upstream_requests_total", labels("upstream", "v", "outcome", "ok")) == 1);
}

TEST_CASE("request series: outcomes other than ok go by their labels", "[metrics]") {
  auto config = config_with(R"(
  - { name: a, match: { path_prefix: "/" }, upstream: u }
)");
  MetricsShard shard;
  RequestSeries series(shard);
  for (const UpstreamOutcome outcome : {UpstreamOutcome::kOk, UpstreamOutcome::kTimeout,
                                        UpstreamOutcome::kOk, UpstreamOutcome::kReset}) {
    series.count_upstream(config, config->upstreams[0], outcome);
  }
  // An upstream that is not part of the config passed is still counted.
  auto other = config_with(R"(
  - { name: a, match: { path_prefix: "/" }, upstream: u }
)");
  series.count_upstream(config, other->upstreams[0], UpstreamOutcome::kOk);
  const auto s = snapshot_of(shard);
  auto upstream = [&](const char* outcome) {
    return s.value("sluice_upstream_requests_total", labels("upstream", "u", "outcome", outcome));
  };
  CHECK(upstream("ok") == 3);
  CHECK(upstream("timeout") == 1);
  CHECK(upstream("reset") == 1);
}
