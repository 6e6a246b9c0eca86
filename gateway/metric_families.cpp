// The metric families the gateway itself counts (the middleware modules
// register theirs: register_metric_families), with their help text.
#include "gateway/metrics.hpp"

namespace sluice {
namespace {

constexpr MetricFamily kGatewayFamilies[] = {
    {"sluice_http_requests_total", "counter", "Requests answered, by route and status code."},
    {"sluice_http_request_duration_seconds", "histogram",
     "Time from request head to response end."},
    {"sluice_upstream_requests_total", "counter", "Upstream exchanges by outcome."},
    {"sluice_upstream_connections_total", "counter", "Upstream connections opened."},
    {"sluice_upstream_connections_open", "gauge",
     "Upstream connections open in the process, against the descriptors left for them."},
    {"sluice_descriptor_reserve_hits_total", "counter",
     "New upstream connections not opened because the descriptors left for them were in use "
     "(the reserve for Redis, the admin listener and health checks is never taken)."},
    {"sluice_upstream_healthy", "gauge",
     "1 while an actively checked upstream server is healthy, 0 while it is not."},
    {"sluice_upstream_health_checks_total", "counter",
     "Active health checks of upstream servers, by result."},
    {"sluice_upstream_server_requests_total", "counter",
     "Attempts at a server of an upstream under outlier detection that got an answer or failed "
     "(connect, reset, timeout), by upstream and server."},
    {"sluice_upstream_server_errors_total", "counter",
     "Of those, the ones answered 5xx or failed, by upstream and server."},
    {"sluice_upstream_ejections_total", "counter",
     "Times a server was ejected by outlier detection, by upstream and server."},
    {"sluice_upstream_ejected", "gauge",
     "1 while outlier detection keeps a server out, 0 while it is in."},
    {"sluice_connections_active", "gauge", "Open client connections."},
    {"sluice_connections_max", "gauge",
     "The client connection cap in force (server.max_connections, lowered to fit the descriptor "
     "limit)."},
    {"sluice_connections_rejected_total", "counter",
     "Client connections closed at accept because the connection cap was reached."},
    {"sluice_connections_shed_total", "counter",
     "Idle keep-alive client connections closed to make room near the connection cap."},
    {"sluice_admin_connections_shed_total", "counter",
     "Admin connections waiting for a request, closed to make room for a new one at the admin "
     "listener's cap."},
    {"sluice_accept_errors_total", "counter",
     "Failed accepts (out of descriptors and the like), by listener."},
    {"sluice_websocket_tunnels_active", "gauge",
     "WebSocket connections being relayed (the upstream answered 101)."},
    {"sluice_websocket_tunnels_total", "counter", "WebSocket upgrades relayed, by route."},
    {"sluice_websocket_bytes_total", "counter",
     "Bytes relayed through WebSocket tunnels after the handshake, by direction "
     "(client_to_upstream, upstream_to_client)."},
    {"sluice_tls_handshakes_total", "counter",
     "TLS handshakes on the data listener by result (error: a protocol or version the "
     "configuration refuses, a client that left or timed out during the handshake)."},
    {"sluice_internal_errors_total", "counter",
     "Exceptions caught on the data path; each closed the one connection it concerned."},
    {"sluice_upstream_retries_total", "counter",
     "Attempts made again: on a fresh connection after a reused one failed before any response "
     "byte, on another HTTP/2 stream after a refused one, and by a route's retry policy."},
    {"sluice_mirror_requests_total", "counter",
     "Copies of a route's requests sent to its mirror upstream, by outcome (answered, failed, "
     "skipped)."},
    {"sluice_upstream_retry_budget_exhausted_total", "counter",
     "Retries a route's policy wanted that the upstream's retry budget refused."},
    {"sluice_config_reloads_total", "counter", "Configuration reloads by result."},
    {"sluice_build_info", "gauge", "Always 1; the version label is what sluice --version prints."},
};

}  // namespace

std::span<const MetricFamily> gateway_metric_families() { return kGatewayFamilies; }

}  // namespace sluice
