#include "gateway/session/exchange_log.hpp"

#include <algorithm>

#include "gateway/metrics.hpp"
#include "gateway/session/http2_goaway_reasons.hpp"
#include "upstream/exchange/upstream_exchange.hpp"

namespace sluice {
namespace {

// Every `outcome` of sluice_upstream_requests_total that a session counts.
constexpr std::string_view kUpstreamOutcomes[] = {"ok",    "connect_error",  "timeout",
                                                  "reset", "protocol_error", "connection_limit"};

std::string_view protocol_name(UpstreamProtocol protocol) {
  switch (protocol) {
    case UpstreamProtocol::kHttp1: return "http1";
    case UpstreamProtocol::kH2c: return "h2c";
    case UpstreamProtocol::kH2: return "h2";
  }
  return "http1";
}

// The facts a recorded trace's spans are made of.
void trace_facts(const ExchangeRecord& record, std::chrono::steady_clock::time_point ended,
                 TraceFacts& facts) {
  facts.span_id = record.span_id;
  facts.parent_span_id = record.parent_span_id;
  facts.scheme = record.route ? record.scheme : std::string_view{};  // unset before routing
  facts.started = record.started;
  facts.ended = ended;
  const UpstreamExchange* exchange = record.exchange;
  const UpstreamConfig* upstream = exchange ? exchange->facts().upstream : nullptr;
  if (!upstream) return;
  facts.upstream = upstream->name;
  const auto attempts = exchange->attempt_records();
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    const AttemptRecord& a = attempts[i];
    AttemptTrace& t = facts.attempts.emplace_back();
    t.server = upstream->servers[a.server].to_string();
    t.protocol = protocol_name(upstream->protocol);
    t.started = a.started;
    // A failed attempt ends when its failure was noted; one answered lasts
    // while its response is relayed (to the next attempt, or the end).
    const bool failed = a.ended && a.outcome != UpstreamOutcome::kOk;
    t.ended = failed ? a.ended_at : i + 1 < attempts.size() ? attempts[i + 1].started : ended;
    t.outcome = a.ended ? outcome_label(a.outcome) : std::string_view{};
    t.status = a.ended ? a.status : 0;
  }
}

}  // namespace

void log_exchange(const ExchangeRecord& record, const std::shared_ptr<const Config>& config,
                  RequestSeries& series,
                  std::span<const std::shared_ptr<ExchangeObserver>> observers) {
  const auto ended = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(ended - record.started).count();
  series.count_request(config, record.route, record.status, seconds);
  const auto wanted = [&](const auto& observer) {
    return observer->wants(*config, record.recorded);
  };
  if (std::none_of(observers.begin(), observers.end(), wanted)) return;
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
  TraceFacts trace;
  if (record.recorded) {
    trace_facts(record, ended, trace);
    summary.trace = &trace;
  }
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
