// The record of a finished exchange: the request series (requests by route and
// status, duration by route) and the summary handed to the exchange observers
// (the access log). Called on the worker's executor, once per exchange.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string_view>

#include "gateway/client_ip.hpp"
#include "gateway/config/config.hpp"
#include "gateway/middleware.hpp"
#include "gateway/request_series.hpp"

namespace sluice {

class MetricsShard;

// What a client session knows of an exchange when it ends.
class UpstreamExchange;

struct ExchangeRecord {
  const RouteConfig* route = nullptr;  // null when no route matched
  bool have_head = false;              // a request head was read
  std::string_view method;             // with a head only
  std::string_view protocol;           // "HTTP/1.0", "HTTP/1.1" or "HTTP/2"; with a head only
  std::string_view target;             // as received, with a head only
  IpAddress client_ip;                 // the resolved client IP, or the peer without a head
  std::string_view request_id;
  std::string_view trace_id;           // with a head only
  // Set when the trace is recorded (tracing on, sampled): Sluice's span and
  // its parent's (empty: none), with a head only.
  bool recorded = false;
  std::string_view span_id;
  std::string_view parent_span_id;
  std::string_view scheme;
  unsigned status = 0;               // what the client got (499: nothing, it went away)
  unsigned upstream_status = 0;      // the upstream's status, 0 when it gave none
  unsigned local_status = 0;         // the status of Sluice's own reply, 0 when none
  std::string_view upstream_server;  // "host:port" of the upstream that answered
  const UpstreamExchange* exchange = nullptr;  // its attempts; null: none was made
  std::chrono::steady_clock::time_point started;
  const DecisionRecord* decision = nullptr;  // with a head only
};

// Counts the exchange and tells the observers about it.
void log_exchange(const ExchangeRecord& record, const std::shared_ptr<const Config>& config,
                  RequestSeries& series,
                  std::span<const std::shared_ptr<ExchangeObserver>> observers);

// A zero series for every label combination the sessions of `config` can
// count: request duration per route, upstream exchanges per upstream and
// outcome, upstream connections per upstream. At startup and after a reload.
void seed_session_metrics(const Config& config, MetricsShard& metrics);

}  // namespace sluice
