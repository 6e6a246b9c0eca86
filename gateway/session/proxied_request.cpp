#include "gateway/session/proxied_request.hpp"

#include "gateway/metrics.hpp"
#include "gateway/mirror/mirror_request.hpp"
#include "gateway/session/client_read_error.hpp"
#include "gateway/session/exchange_log.hpp"
#include "gateway/session/local_reply.hpp"
#include "gateway/session/request_path.hpp"
#include "gateway/worker.hpp"

namespace sluice {

ProxiedRequest::ProxiedRequest(Worker& worker, RequestLeg& leg, WorkerExecutor executor)
    : worker_(worker),
      leg_(leg),
      config_(worker.config()),
      exchange_(*this, leg, std::move(executor), worker.pools()) {}

ProxiedRequest::~ProxiedRequest() {
  release_relay_buffer();
  if (mirror_) worker_.mirrors().release(mirror_->route);
}

void ProxiedRequest::set_peer(const IpAddress& peer, std::string_view peer_text,
                              const ClientCertificate* client_cert) {
  peer_ = peer;
  peer_text_ = peer_text;
  client_cert_ = client_cert;
}

void ProxiedRequest::start() {
  started_ = Clock::now();
  info_.request_id.clear();
  info_.route = nullptr;
  response_headers_.clear();
}

const std::string& ProxiedRequest::request_id() {
  if (info_.request_id.empty()) generate_request_id(info_.request_id);
  return info_.request_id;
}

// ---- The middleware ---------------------------------------------------------------

void ProxiedRequest::run() {
  begin_pipeline(pipeline_, *head_, info_, config_, started_).client_cert = client_cert_;
  const RouteConfig& route = *info_.route;
  if (route.reads_request_body() && !info_.body.done && !info_.websocket) {
    // The steps read members of the body: its first bytes come first.
    return exchange_.read_ahead(relay_buffer(), route.body.max_inspect_bytes);
  }
  run_pipeline();
}

void ProxiedRequest::read_ahead_done(boost::beast::error_code ec) {
  if (ec) return on_request_body_failed(ec);
  leg_.body_read_ahead();
  RequestContext& ctx = pipeline_.context();
  ctx.request_body = exchange_.read_ahead_bytes();
  // Its whole length: read to its end, or declared; else what was read so far.
  ctx.request_body_length = leg_.body_done()
                                ? ctx.request_body.size()
                                : leg_.declared_length().value_or(ctx.request_body.size());
  run_pipeline();
}

void ProxiedRequest::run_pipeline() {
  if (leg_.closed()) return;  // the client is gone: nothing goes upstream for it
  auto result = pipeline_.advance(worker_.chain(), *this);
  if (result.step == MiddlewareStep::kPending) return;
  on_middleware_outcome(std::move(result.reply));
}

MiddlewareDone ProxiedRequest::take() {
  return handler([](ProxiedRequest& self, std::optional<LocalReply> reply) {
    self.stop_watch();
    if (self.leg_.closed()) return;  // the client is gone: the outcome is dropped
    if (reply) {
      self.on_middleware_outcome(std::move(reply));
    } else {
      self.run_pipeline();
    }
    self.leg_.flush();
  });
}

void ProxiedRequest::watch_client(std::function<void()> gone) {
  if (leg_.closed()) return;
  gone_ = std::move(gone);
  leg_.watch();
}

void ProxiedRequest::stop_watch() {
  gone_ = nullptr;
  leg_.unwatch();
}

void ProxiedRequest::client_gone() {
  if (!gone_) return;
  auto tell = std::move(gone_);
  gone_ = nullptr;
  tell();
}

// Every step continued (no reply), or one answered.
void ProxiedRequest::on_middleware_outcome(std::optional<LocalReply> reply) {
  pipeline_.take_response_headers(response_headers_);
  pipeline_.context().request_body = {};  // the bytes read ahead go upstream from here
  if (!reply) return start_upstream();
  // A half-read body also ends an HTTP/1.1 connection.
  const bool close = reply->close_connection || !leg_.body_done();
  leg_.send_local(std::move(*reply), close);
}

// ---- The exchange -------------------------------------------------------------------

void ProxiedRequest::start_upstream() {
  set_header_vars(info_, client_ip_text_, header_vars_);
  prepare_forwarded_head(upstream_head_, *head_, info_, pipeline_.context(), header_vars_,
                         peer_text_, leg_.declared_length());
  const UpstreamConfig& upstream = choose_upstream(worker_.splits(), config_, info_, *head_);
  ExchangeRequest request = exchange_request(*config_, upstream, info_, *head_);
  request.head = &upstream_head_;
  request.relay = relay_buffer();
  request.observer = pipeline_.context().response_observer.get();
  if (info_.route->mirror) take_mirror(request);
  in_exchange_ = true;
  exchange_.start(request, std::shared_ptr<UpstreamExchange>(leg_.keep_alive(), &exchange_));
}

void ProxiedRequest::take_mirror(ExchangeRequest& request) {
  const RouteConfig& route = *info_.route;
  if (info_.websocket) return;
  // A body known to be over the bound is never copied: it holds no slot.
  const auto length = leg_.declared_length();
  const bool too_long =
      !info_.body.done && (route.mirror->max_body_bytes == 0 ||
                           (length && *length > route.mirror->max_body_bytes));
  if (too_long) {
    count_mirror(worker_, route.name, "skipped");
    return;
  }
  switch (worker_.mirrors().take(route.name, *route.mirror)) {
    case RouteMirrors::Take::kNo:
      return;
    case RouteMirrors::Take::kSkipped:
      count_mirror(worker_, route.name, "skipped");
      return;
    case RouteMirrors::Take::kMirror:
      break;
  }
  mirror_ = PendingMirror{route.name, info_.body.done, info_.body.chunked};
  // The body is kept as it goes, for the copy.
  if (!info_.body.done) request.keep_body = route.mirror->max_body_bytes;
}

void ProxiedRequest::send_mirror_copy() {
  const RouteConfig& route = *info_.route;
  const std::optional<std::string_view> body =
      mirror_->body_empty ? std::optional<std::string_view>("") : exchange_.kept_body();
  // A body not read whole (the request failed), or longer than the bound; or
  // the worker drains (no copy then keeps it from stopping).
  if (!body || body->size() > route.mirror->max_body_bytes || worker_.draining()) {
    return drop_mirror("skipped");
  }
  const bool chunked = mirror_->chunked;
  mirror_.reset();  // the copy holds the route's slot from here
  send_mirror(worker_, config_, route, {&upstream_head_, *body, chunked});
}

void ProxiedRequest::drop_mirror(std::string_view outcome) {
  worker_.mirrors().release(mirror_->route);
  count_mirror(worker_, mirror_->route, outcome);
  mirror_.reset();
}

void ProxiedRequest::set_deadline(Side side, Clock::duration timeout) {
  leg_.set_deadline(side, timeout);
}

std::span<char> ProxiedRequest::relay_buffer() {
  if (!relay_) relay_ = worker_.take_relay_buffer();
  return {relay_.get(), Worker::kRelayBufferSize};
}

void ProxiedRequest::release_relay_buffer() { worker_.return_relay_buffer(std::move(relay_)); }

ResponseHeadOptions ProxiedRequest::response_head_options() const {
  return sluice::response_head_options(info_, response_headers_, header_vars_);
}

void ProxiedRequest::count_facts() {
  const ExchangeFacts facts = exchange_.take_facts();
  if (!facts.upstream) return;
  facts.each_attempt([&](UpstreamOutcome outcome, std::uint16_t n) {
    for (std::uint16_t i = 0; i < n; ++i) {
      worker_.series().count_upstream(config_, *facts.upstream, outcome);
    }
  });
  if (facts.retries > 0) {
    worker_.metrics().add("sluice_upstream_retries_total", "", facts.retries);
  }
  if (facts.retries_refused > 0) {
    worker_.metrics().add("sluice_upstream_retry_budget_exhausted_total",
                          scratch_labels({{"upstream", facts.upstream->name}}),
                          facts.retries_refused);
  }
}

void ProxiedRequest::exchange_ended(const ExchangeResult& result) {
  in_exchange_ = false;
  // The upstream's outcome counts now, before any reply goes out: whoever
  // reads the metrics after the response sees it.
  count_facts();
  // A copy of a request the client gave up on (or whose body broke) is not sent.
  if (mirror_ && (result.end == ExchangeResult::End::kAborted ||
                  result.end == ExchangeResult::End::kRequestBodyFailed)) {
    drop_mirror("skipped");
  }
  if (mirror_) send_mirror_copy();
  leg_.exchange_ending();
  switch (result.end) {
    case ExchangeResult::End::kRelayed:
      record(exchange_.upstream_status());
      leg_.relayed(result.client_keep_alive);
      break;
    case ExchangeResult::End::kUpstreamFailed:
      // The request body may be half read: an HTTP/1.1 connection closes
      // after the reply unless it is done.
      reply(status_for(result.error), message_for(result.error), !leg_.body_done());
      break;
    case ExchangeResult::End::kRequestBodyFailed:
      on_request_body_failed(result.body_error);
      break;
    case ExchangeResult::End::kAborted:
      abort(exchange_.upstream_status(), CutReason::kInternal);
      break;
  }
  leg_.exchange_finished();
}

// The request body could not be read (the upstream connection is dropped
// already): the client is told why when it can still read a reply.
void ProxiedRequest::on_request_body_failed(boost::beast::error_code ec) {
  if (leg_.body_timed_out(ec)) {
    // No body byte for body_timeout: the request is cut off upstream and the
    // client told so (no response has started yet).
    return reply(408, "request body not received in time", true);
  }
  const ClientReadError error = client_read_error(ec, ReadPhase::kBody);
  if (error.status != 0 && !leg_.closed()) return reply(error.status, error.message, true);
  abort(0, CutReason::kCancel);
}

void ProxiedRequest::reply(unsigned status, std::string_view message, bool close_after) {
  leg_.send_local(make_local_reply(status, message, info_.request_id), close_after);
}

void ProxiedRequest::abort(unsigned status, CutReason reason) {
  // 499 (nginx's "client closed request") when no status was sent yet.
  if (head_) record(status ? status : 499);
  leg_.cut(reason);
}

// ---- A WebSocket tunnel ---------------------------------------------------------------

void ProxiedRequest::tunnel_opened() {
  leg_.tunnel_opened();
  record(exchange_.upstream_status(), false);  // it ends when the tunnel closes
  worker_.metrics().add("sluice_websocket_tunnels_total",
                        scratch_labels({{"route", info_.route->name}}));
}

void ProxiedRequest::tunnel_relayed(TunnelDirection direction, std::size_t n) {
  worker_.metrics().add("sluice_websocket_bytes_total",
                        direction == TunnelDirection::kClientToUpstream
                            ? R"(direction="client_to_upstream")"
                            : R"(direction="upstream_to_client")",
                        static_cast<double>(n));
}

void ProxiedRequest::tunnel_ended(bool graceful) {
  pipeline_.end({101, std::nullopt});
  leg_.tunnel_ended(graceful);
}

// ---- The record ------------------------------------------------------------------------

void ProxiedRequest::end_pipeline() {
  pipeline_.end({local_status_ ? local_status_ : exchange_.upstream_status(), exchange_.usage()});
}

void ProxiedRequest::end_pipeline_at_close() {
  pipeline_.end({exchange_.upstream_status(), exchange_.usage()});
}

void ProxiedRequest::record(unsigned status, bool ended) {
  if (recorded_) return;
  recorded_ = true;
  // The steps' end hooks run first (a settled cost is then in the decision).
  if (ended) end_pipeline();
  count_facts();
  ExchangeRecord record;
  record.route = info_.route;
  record.have_head = head_ != nullptr;
  if (head_) {
    record.method = head_->method_string();
    record.protocol = leg_.protocol();
    record.target = info_.original_target.empty() ? std::string_view{head_->target()}
                                                  : std::string_view{info_.original_target};
  }
  record.client_ip = head_ ? info_.client_ip : peer_;
  record.request_id = info_.request_id;
  record.status = status;
  record.upstream_status = exchange_.upstream_status();
  record.local_status = local_status_;
  record.upstream_server = exchange_.upstream_server();
  record.exchange = &exchange_;
  record.started = started_;
  if (head_) {
    record.decision = &pipeline_.context().decision;
    record.trace_id = info_.trace_id;
    record.recorded = info_.recorded;
    record.span_id = info_.span_id;
    record.parent_span_id = info_.parent_span_id;
    record.scheme = info_.forwarded_proto;
  }
  log_exchange(record, config_, worker_.series(), worker_.chain().observers);
}

void ProxiedRequest::reset() {
  if (mirror_) drop_mirror("skipped");
  end_pipeline();
  pipeline_.context().decision = {};
  exchange_.reset();
  local_status_ = 0;
  info_.original_target.clear();
  recorded_ = false;
  head_ = nullptr;
}

}  // namespace sluice
