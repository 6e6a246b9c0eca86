// The client session's side of an exchange: the middleware pipeline, the
// upstream exchange it then starts (as its ExchangeHost), and the record of
// the finished exchange.
#include "gateway/session/http1_session.hpp"

#include <sys/socket.h>

#include <cerrno>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "gateway/metrics.hpp"
#include "gateway/session/client_read_error.hpp"
#include "gateway/session/exchange_log.hpp"
#include "gateway/session/local_reply.hpp"
#include "gateway/session/request_path.hpp"
#include "gateway/session/session.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

}  // namespace

// ---- Middleware -------------------------------------------------------------

void Http1Session::run_middleware() {
  begin_pipeline(pipeline_, parser_->get(), info_, config_, started_);
  run_pipeline();
}

void Http1Session::run_pipeline() {
  if (closed_) return;  // the client is gone: nothing goes upstream for it
  auto result = pipeline_.advance(worker_.chain(), *this);
  if (result.step == MiddlewareStep::kPending) return;
  on_middleware_outcome(std::move(result.reply));
}

MiddlewareDone Http1Session::take() {
  return handler([](Http1Session& self, std::optional<LocalReply> reply) {
    self.stop_watching();
    if (self.closed_) return;  // the client is gone: the outcome is dropped
    if (reply) return self.on_middleware_outcome(std::move(reply));
    self.run_pipeline();
  });
}

void Http1Session::watch_client(std::function<void()> gone) {
  if (closed_) return;
  client_gone_ = std::move(gone);
  await_client();
}

void Http1Session::await_client() {
  watch_pending_ = true;
  stream_.socket().async_wait(
      tcp::socket::wait_read,
      handler([generation = watch_generation_](Http1Session& self, beast::error_code ec) {
        self.on_client_readable(ec, generation);
      }));
}

void Http1Session::on_client_readable(beast::error_code ec, std::uint64_t generation) {
  if (generation != watch_generation_) return;  // a watch that ended
  watch_pending_ = false;
  if (!client_gone_) return;
  bool gone = closed_;  // closed by the session itself (drain deadline, internal error)
  // A socket closed without closed_ (a deadline) is gone: OpenSSL must not
  // touch a descriptor number another connection may hold by now.
  if (!gone && !ec && !stream_.socket().is_open()) gone = true;
  if (!gone && !ec && stream_.is_tls()) {
    // Over TLS a goodbye (close_notify) is a record like any other: OpenSSL
    // reads what came and keeps any data for the request's next read.
    const auto peeked = stream_.tls_session().attempt_peek();
    if (peeked.bytes > 0 || peeked.want == TlsSocket::Want::kWrite) return;
    if (peeked.want == TlsSocket::Want::kRead) return await_client();
    gone = true;  // close_notify, end of stream or an error
  } else if (!gone && !ec) {
    char byte;
    const auto n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    // A body or the next request: the request goes on, unwatched; a close of
    // the connection still tells the step (tell_client_gone).
    if (n > 0) return;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return await_client();
    // End of stream (a close or a half-close: as nginx, a client that stopped
    // sending is taken to have left) or a hard error (a reset).
    gone = true;
  }
  if (ec && !gone && ec != asio::error::operation_aborted) gone = true;
  if (!gone) return;
  if (closed_) return tell_client_gone();
  // Closed before the step hears of it: a step that completes inside
  // tell_client_gone() (a delayed request's wait) has its outcome dropped
  // rather than sent upstream for a client that left.
  closed_ = true;
  tell_client_gone();
  abort_exchange();
}

// While the upstream has not answered, a client that closes, half-closes or
// resets its connection aborts the exchange at once (on_client_readable): the
// upstream request is cancelled (its connection dropped, an HTTP/2 stream
// reset), the exchange logged 499, and what the request held (a concurrency
// slot) given back. A route that ignores client aborts lets the upstream
// finish; a client that left is then noticed when the response is written.
void Http1Session::awaiting_response(bool waiting) {
  if (!waiting) {
    if (!watching_response_wait_) return;
    watching_response_wait_ = false;
    return stop_watching();
  }
  if (closed_ || watch_pending_ || watching_response_wait_) return;
  if (info_.route && info_.route->ignore_client_abort) return;
  // A pipelined request already read: the client is there, even if it has
  // shut its sending side since (nc -N after its requests).
  if (buffer_.size() > 0) return;
  watching_response_wait_ = true;
  client_gone_ = [] {};  // nothing to tell: the abort is on_client_readable's own
  await_client();
}

// The watched step learns, in this call, that the client is gone.
void Http1Session::tell_client_gone() {
  if (!client_gone_) return;
  auto tell = std::move(client_gone_);
  client_gone_ = nullptr;
  tell();
}

// The watched step completed: its watch ends.
void Http1Session::stop_watching() {
  client_gone_ = nullptr;
  ++watch_generation_;
  if (!watch_pending_ || closed_) return;
  watch_pending_ = false;
  beast::error_code ignored;
  stream_.socket().cancel(ignored);
}

// Every step continued (no reply), or one answered.
void Http1Session::on_middleware_outcome(std::optional<LocalReply> reply) {
  response_headers_ = pipeline_.take_response_headers();
  if (!reply) return start_upstream();
  // A half-read body also ends the connection.
  const bool close = reply->close_connection || !body_done();
  send_local(std::move(*reply), close);
}

// ---- The upstream exchange ------------------------------------------------------

void Http1Session::start_upstream() {
  set_header_vars(info_, client_ip_text_, header_vars_);
  exchange_.start(exchange_request(*config_, info_, parser_->get()),
                  std::shared_ptr<UpstreamExchange>(shared_from_this(), &exchange_));
}

std::span<char> Http1Session::relay_buffer() {
  if (!relay_buffer_) relay_buffer_ = worker_.take_relay_buffer();
  return {relay_buffer_.get(), Worker::kRelayBufferSize};
}

void Http1Session::serialize_request_head(std::string& out, std::string_view upstream_host) {
  serialize_forwarded_head(out, parser_->get(), info_, pipeline_.context(), header_vars_,
                           peer_text_, upstream_host, to_std(parser_->content_length()));
}

void Http1Session::count_upstream(const UpstreamConfig& upstream, UpstreamOutcome outcome) {
  worker_.series().count_upstream(config_, upstream, outcome);
}

void Http1Session::count_connection(const UpstreamConfig& upstream) {
  worker_.metrics().add("sluice_upstream_connections_total",
                        scratch_labels({{"upstream", upstream.name}}));
}

void Http1Session::count_retry() {
  worker_.metrics().add("sluice_upstream_retries_total", "");
}

void Http1Session::exchange_ended(const ExchangeResult& result) {
  switch (result.end) {
    case ExchangeResult::End::kRelayed:
      return on_relayed(result.client_keep_alive);
    case ExchangeResult::End::kUpstreamFailed:
      return on_upstream_failed(result.error);
    case ExchangeResult::End::kRequestBodyFailed:
      return on_request_body_failed(result.body_error);
    case ExchangeResult::End::kAborted:
      return abort_exchange();
  }
}

void Http1Session::on_relayed(bool keep) {
  record(exchange_.upstream_status());
  reset_exchange();
  if (!keep) return graceful_close();
  do_read_head();
}

// ---- A WebSocket tunnel ---------------------------------------------------------

void Http1Session::tunnel_opened() {
  deadline_.clear();  // the tunnel keeps its own idle timeout
  record(exchange_.upstream_status(), false);  // it ends when the tunnel closes
  in_tunnel_ = true;
  worker_.tunnels_changed(1);
  worker_.metrics().add("sluice_websocket_tunnels_total",
                        scratch_labels({{"route", info_.route->name}}));
}

void Http1Session::tunnel_relayed(TunnelDirection direction, std::size_t n) {
  worker_.metrics().add("sluice_websocket_bytes_total",
                        direction == TunnelDirection::kClientToUpstream
                            ? R"(direction="client_to_upstream")"
                            : R"(direction="upstream_to_client")",
                        static_cast<double>(n));
}

void Http1Session::tunnel_ended(bool graceful) {
  in_tunnel_ = false;
  pipeline_.end({101, std::nullopt});
  worker_.tunnels_changed(-1);
  if (closed_) return;
  if (graceful) return graceful_close();
  close();
}

void Http1Session::on_upstream_failed(UpstreamError error) {
  // The request body may be half read: close after the reply unless it is done.
  send_local(make_local_reply(status_for(error), message_for(error), info_.request_id),
             !parser_->is_done());
}

// The request body could not be read (the upstream connection is dropped
// already): the client is told why when it can still read a reply.
void Http1Session::on_request_body_failed(beast::error_code ec) {
  const ClientReadError error = client_read_error(ec, ReadPhase::kBody);
  if (client_timed_out_ && error.status != 413) {
    // No body byte for body_timeout: the request is cut off upstream and
    // the client told so (no response has started yet).
    return send_local(make_local_reply(408, "request body not received in time", info_.request_id),
                      true);
  }
  if (error.status == 0) return abort_exchange();
  send_local(make_local_reply(error.status, error.message, info_.request_id), true);
}

void Http1Session::abort_exchange() {
  exchange_.drop_upstream();
  // 499 (nginx's "client closed request") when no status was sent yet.
  if (parser_ && parser_->is_header_done()) {
    const auto status = exchange_.upstream_status();
    record(status ? status : 499);
  }
  close();
}

void Http1Session::record(unsigned status, bool ended) {
  if (recorded_) return;
  recorded_ = true;
  // The steps' end hooks run first (a settled cost is then in the decision).
  if (ended) end_exchange();
  ExchangeRecord record;
  record.route = info_.route;
  record.have_head = parser_ && parser_->is_header_done();
  if (record.have_head) {
    record.method = parser_->get().method_string();
    record.protocol = parser_->get().version() == 10 ? "HTTP/1.0" : "HTTP/1.1";
    record.target = info_.original_target.empty() ? std::string_view{parser_->get().target()}
                                                  : std::string_view{info_.original_target};
  }
  record.client_ip = record.have_head ? info_.client_ip : peer_;
  record.request_id = info_.request_id;
  record.status = status;
  record.upstream_status = exchange_.upstream_status();
  record.local_status = local_status_;
  record.upstream_server = exchange_.upstream_server();
  record.started = started_;
  if (record.have_head) {
    record.decision = &pipeline_.context().decision;
    record.trace_id = info_.trace_id;
  }
  log_exchange(record, config_, worker_.series(), worker_.chain().observers);
}

void start_client_session(Worker& worker, WorkerSocket socket,
                          std::shared_ptr<const ServerTls> tls) {
  auto session = std::make_shared<Http1Session>(worker, std::move(socket), std::move(tls));
  if (worker.draining()) session->on_drain();
  session->start();
}

}  // namespace sluice
