// What Sluice tells of itself: its log (log:), the denial stream (audit:),
// and the spans it exports over OTLP/HTTP (JSON) to a collector (tracing:).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "upstream/http/http_call.hpp"
#include "upstream/upstream_tls.hpp"

namespace sluice {

struct LogConfig {
  std::string level = "info";  // trace | debug | info | warn | error
  bool access_log = true;
  // Access-log lines are gathered (up to 64 KiB) and written at most this
  // long after the first of them; 0 (the default) writes each line at once.
  std::chrono::milliseconds access_log_flush{0};
  // The sampled flag of the traceparent Sluice starts for a request without one.
  bool trace_sampled = false;
};

// The denial stream: every denial appended to a Redis Stream (off when
// redis_stream is empty), capped at max_len entries.
struct AuditConfig {
  std::string redis_stream;
  std::size_t max_len = 100000;
};

struct TracingConfig {
  // tracing.endpoint: the collector's OTLP/HTTP traces URL; empty: no spans.
  HttpUrl endpoint;
  bool enabled() const { return !endpoint.host.empty(); }
  // Of the traces Sluice starts (no sampled parent), this share is recorded;
  // with parent_based, a request's traceparent decides for its own trace.
  double sampling_ratio = 1.0;
  bool parent_based = true;
  std::string service_name = "sluice";
  std::vector<std::pair<std::string, std::string>> resource_attributes;
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every export
  UpstreamTlsConfig tls_config;
  std::shared_ptr<const UpstreamTls> tls;  // https only
  std::size_t max_queue_spans = 2048;
  std::size_t max_batch_spans = 512;
  std::chrono::milliseconds flush_interval{1000};
  std::chrono::milliseconds timeout{10000};

  bool operator==(const TracingConfig& o) const {
    return endpoint.text == o.endpoint.text && sampling_ratio == o.sampling_ratio &&
           parent_based == o.parent_based && service_name == o.service_name &&
           resource_attributes == o.resource_attributes && headers == o.headers &&
           tls_config == o.tls_config && max_queue_spans == o.max_queue_spans &&
           max_batch_spans == o.max_batch_spans && flush_interval == o.flush_interval &&
           timeout == o.timeout;
  }
};

}  // namespace sluice
