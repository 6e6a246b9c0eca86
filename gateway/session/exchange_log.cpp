#include "gateway/session/exchange_log.hpp"

#include "gateway/metrics.hpp"
#include "gateway/session/http2_goaway_reasons.hpp"
#include "upstream/exchange/upstream_exchange.hpp"

namespace sluice {
namespace {

// Every `outcome` of sluice_upstream_requests_total that a session counts.
constexpr std::string_view kUpstreamOutcomes[] = {"ok",    "connect_error",  "timeout",
                                                  "reset", "protocol_error", "connection_limit"};

}  // namespace

void log_exchange(const ExchangeRecord& record, const std::shared_ptr<const Config>& config,
                  RequestSeries& series,
                  std::span<const std::shared_ptr<ExchangeObserver>> observers) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - record.started).count();
  series.count_request(config, record.route, record.status, seconds);
  if (observers.empty()) return;
  ExchangeSummary summary;
  summary.route = record.route ? std::string_view{record.route->name} : std::string_view{};
  summary.method = record.method;
  summary.protocol = record.protocol;
  summary.target = record.target;
  summary.status = record.status;
  summary.client_ip = record.client_ip;
  summary.request_id = record.request_id;
  summary.trace_id = record.trace_id;
  summary.upstream_server = record.upstream_status ? record.upstream_server : std::string_view{};
  // The servers' names are joined only for a log that has observers.
  std::string servers_tried;
  if (record.exchange && record.exchange->attempts() > 0) {
    summary.attempts = record.exchange->attempts();
    servers_tried = record.exchange->servers_tried();
    summary.servers_tried = servers_tried;
  }
  summary.duration_seconds = seconds;
  summary.local = record.local_status == record.status && !record.upstream_status;
  summary.decision = record.decision;
  for (const auto& observer : observers) observer->on_exchange(*config, summary);
}

void seed_session_metrics(const Config& config, MetricsShard& metrics) {
  for (const auto& route : config.routes) {
    if (route.mirror) {
      for (const auto outcome : {"answered", "failed", "skipped"}) {
        metrics.declare("sluice_mirror_requests_total",
                        scratch_labels({{"route", route.name}, {"outcome", outcome}}));
      }
    }
    metrics.declare_histogram("sluice_http_request_duration_seconds",
                              scratch_labels({{"route", route.name}}));
    metrics.declare("sluice_websocket_tunnels_total", scratch_labels({{"route", route.name}}));
  }
  metrics.declare("sluice_websocket_tunnels_active", "");
  for (const auto reason : kHttp2GoawayReasons) {
    metrics.declare("sluice_http2_goaways_total", scratch_labels({{"reason", reason}}));
  }
  metrics.declare("sluice_websocket_bytes_total", R"(direction="client_to_upstream")");
  metrics.declare("sluice_websocket_bytes_total", R"(direction="upstream_to_client")");
  for (const auto& upstream : config.upstreams) {
    metrics.declare("sluice_upstream_connections_total",
                    scratch_labels({{"upstream", upstream.name}}));
    metrics.declare("sluice_upstream_retry_budget_exhausted_total",
                    scratch_labels({{"upstream", upstream.name}}));
    for (const auto outcome : kUpstreamOutcomes) {
      metrics.declare("sluice_upstream_requests_total",
                      scratch_labels({{"upstream", upstream.name}, {"outcome", outcome}}));
    }
  }
}

}  // namespace sluice
