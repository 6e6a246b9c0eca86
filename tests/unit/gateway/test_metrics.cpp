// Metrics registry pieces added for zero series and process metrics: declared
// series, the route x status-code fill at scrape time, the rate-limit seeds of
// a config, and the parsing of /proc text for the process metrics.
#include <catch2/catch.hpp>

#include <string>

#include "gateway/config/load.hpp"
#include "gateway/metrics.hpp"
#include "gateway/process_metrics.hpp"
#include "support/metrics_snapshot.hpp"
#include "middleware/ratelimit/metrics.hpp"
#include "middleware/ratelimit/rate_limit_middleware.hpp"

using namespace sluice;
using sluice::test::snapshot_of;

TEST_CASE("declared series render as 0 and add up with counted ones", "[metrics]") {
  MetricsShard seeds, worker;
  seeds.declare("sluice_upstream_requests_total", labels("upstream", "u", "outcome", "ok"));
  seeds.declare_histogram("sluice_http_request_duration_seconds", label("route", "r"));
  worker.add("sluice_upstream_requests_total", labels("upstream", "u", "outcome", "ok"), 2);
  // Declaring an existing series keeps its value.
  worker.declare("sluice_upstream_requests_total", labels("upstream", "u", "outcome", "ok"));
  MetricsSnapshot s;
  seeds.merge_into(s);
  worker.merge_into(s);
  const auto text = s.render();
  CHECK(text.find("sluice_upstream_requests_total{upstream=\"u\",outcome=\"ok\"} 2\n") !=
        std::string::npos);
  CHECK(text.find("sluice_http_request_duration_seconds_bucket{route=\"r\",le=\"+Inf\"} 0\n") !=
        std::string::npos);
  CHECK(text.find("sluice_http_request_duration_seconds_count{route=\"r\"} 0\n") !=
        std::string::npos);
}

TEST_CASE("cross_fill: every route gets every status code any route has", "[metrics]") {
  MetricsShard shard;
  shard.add("sluice_http_requests_total", labels("route", "a", "code", "200"));
  shard.add("sluice_http_requests_total", labels("route", "", "code", "404"));
  shard.add("sluice_http_requests_total", labels("route", "q\"x", "code", "429"), 3);
  auto s = snapshot_of(shard);
  s.cross_fill("sluice_http_requests_total", "route", {"a", "b", "q\"x"});
  for (const char* route : {"a", "b", "q\"x"}) {
    for (const char* code : {"200", "404", "429"}) {
      INFO(route << " " << code);
      CHECK(s.has("sluice_http_requests_total", labels("route", route, "code", code)));
    }
  }
  CHECK(s.value("sluice_http_requests_total", labels("route", "a", "code", "200")) == 1);
  CHECK(s.value("sluice_http_requests_total", labels("route", "q\"x", "code", "429")) == 3);
  CHECK(s.value("sluice_http_requests_total", labels("route", "b", "code", "429")) == 0);
  // The unmatched route keeps its own series only.
  CHECK_FALSE(s.has("sluice_http_requests_total", labels("route", "", "code", "200")));

  MetricsSnapshot empty;
  empty.cross_fill("sluice_http_requests_total", "route", {"a"});
  CHECK(empty.render().find("sluice_http_requests_total{") == std::string::npos);
}

TEST_CASE("rate-limit seeds follow the config", "[metrics][ratelimit]") {
  auto result = parse_config(R"(
api_keys: { header: Authorization }
upstreams:
  u: { servers: ["127.0.0.1:9"] }
limits:
  per_key: { key: api_key, capacity: 10, refill_per_second: 2 }
  per_ip: { key: ip, capacity: 10, refill_per_second: 2 }
  per_tenant: { key: [header:X-Tenant, query:t], capacity: 10, refill_per_second: 2 }
routes:
  - { name: keyed, match: { path_prefix: "/k" }, upstream: u, limits: [per_key, per_ip] }
  - { name: closed, match: { path_prefix: "/c" }, upstream: u, limits: [per_ip],
      on_redis_failure: closed }
  - { name: tenant, match: { path_prefix: "/t" }, upstream: u, limits: [per_tenant] }
  - { name: free, match: { path_prefix: "/" }, upstream: u }
)",
                             "t.yaml");
  REQUIRE(result.config);
  MetricsShard shard;
  seed_rate_limit_metrics(*result.config, shard);
  const auto s = snapshot_of(shard);
  auto has = [&](std::string_view family, std::string_view labels) {
    return s.has(family, labels);
  };
  for (const char* decision : {"allowed", "limited"}) {
    CHECK(has("sluice_ratelimit_decisions_total",
              scratch_labels({{"route", "keyed"}, {"limit", "per_key"}, {"decision", decision}})));
    CHECK(has("sluice_ratelimit_decisions_total",
              scratch_labels({{"route", "keyed"}, {"limit", "per_ip"}, {"decision", decision}})));
    CHECK(has("sluice_ratelimit_decisions_total",
              scratch_labels({{"route", "closed"}, {"limit", "per_ip"}, {"decision", decision}})));
    CHECK_FALSE(
        has("sluice_ratelimit_decisions_total",
            scratch_labels({{"route", "free"}, {"limit", "per_ip"}, {"decision", decision}})));
  }
  // Fail-open and fail-closed by the route's failure mode.
  CHECK(has("sluice_ratelimit_fail_open_total", label("route", "keyed")));
  CHECK_FALSE(has("sluice_ratelimit_fail_closed_total", label("route", "keyed")));
  CHECK(has("sluice_ratelimit_fail_closed_total", label("route", "closed")));
  CHECK_FALSE(has("sluice_ratelimit_fail_open_total", label("route", "closed")));
  CHECK_FALSE(has("sluice_ratelimit_fail_open_total", label("route", "free")));
  // Missing sources: only those a request can omit.
  CHECK(has("sluice_ratelimit_missing_key_total", labels("route", "keyed", "source", "api_key")));
  CHECK_FALSE(has("sluice_ratelimit_missing_key_total", labels("route", "keyed", "source", "ip")));
  CHECK(has("sluice_ratelimit_missing_key_total", labels("route", "tenant", "source", "header")));
  CHECK(has("sluice_ratelimit_missing_key_total", labels("route", "tenant", "source", "query")));
  CHECK_FALSE(has("sluice_ratelimit_missing_key_total", labels("route", "closed", "source", "ip")));
  // Refusal reasons: duplicates wherever a client-supplied key is used; a
  // malformed Authorization only where the API key (from Authorization) is.
  CHECK(has("sluice_ratelimit_rejected_total",
            labels("route", "keyed", "reason", "duplicate_identity")));
  CHECK(has("sluice_ratelimit_rejected_total",
            labels("route", "keyed", "reason", "malformed_authorization")));
  CHECK(has("sluice_ratelimit_rejected_total",
            labels("route", "tenant", "reason", "duplicate_identity")));
  CHECK_FALSE(has("sluice_ratelimit_rejected_total",
                  labels("route", "tenant", "reason", "malformed_authorization")));
  CHECK_FALSE(has("sluice_ratelimit_rejected_total",
                  labels("route", "closed", "reason", "duplicate_identity")));
  for (const char* kind : {"timeout", "connect", "protocol", "server", "noscript"}) {
    CHECK(has("sluice_redis_errors_total", label("kind", kind)));
  }
  CHECK(has("sluice_ratelimit_check_duration_seconds", ""));
  CHECK(s.value("sluice_ratelimit_fail_open_total", label("route", "keyed")) == 0);
}

TEST_CASE("process metrics: /proc/self/stat and /proc/stat parsing", "[metrics][process]") {
  // A command name with spaces and parentheses; fields 14, 15, 22 and 24 matter.
  const std::string stat =
      "4242 (sl (u) ice) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 3 0 "
      "987654 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";
  const auto parsed = parse_proc_stat(stat);
  REQUIRE(parsed);
  CHECK(parsed->utime_ticks == 250);
  CHECK(parsed->stime_ticks == 130);
  CHECK(parsed->start_ticks == 987654);
  CHECK(parsed->rss_pages == 2048);
  CHECK_FALSE(parse_proc_stat("4242 (truncated) S 1 2 3"));
  CHECK_FALSE(parse_proc_stat("no parenthesis"));

  CHECK(parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n") == 1700000000.0);
  CHECK_FALSE(parse_boot_time("cpu  1 2 3\n"));

  const auto live = read_process_stats();
  CHECK(live.resident_memory_bytes > 0);
  CHECK(live.open_fds > 0);
  CHECK(live.max_fds >= live.open_fds);
  CHECK(live.start_time_seconds > 1.6e9);

  ProcessStats fixed;
  fixed.cpu_seconds = 1.5;
  fixed.open_fds = 12;
  const auto text = render_process_metrics(fixed);
  CHECK(text.find("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n") !=
        std::string::npos);
  CHECK(text.find("# TYPE process_open_fds gauge\nprocess_open_fds 12\n") != std::string::npos);
  CHECK(text.find("# TYPE process_start_time_seconds gauge\n") != std::string::npos);
}

TEST_CASE("metrics: label sets, plain and escaped", "[metrics]") {
  CHECK(sluice::scratch_labels({}) == "");
  CHECK(sluice::scratch_labels({{"route", "a"}}) == R"(route="a")");
  CHECK(sluice::scratch_labels({{"route", "orders"}, {"limit", ""}, {"decision", "allowed"}}) ==
        R"(route="orders",limit="",decision="allowed")");
  CHECK(sluice::scratch_labels({{"route", "a\"b\\c\nd"}, {"code", "200"}}) ==
        R"(route="a\"b\\c\nd",code="200")");
  // The scratch string is reused: a shorter set after a longer one.
  CHECK(sluice::scratch_labels({{"r", "x"}}) == R"(r="x")");
}
