// One request on its way through the gateway, whatever protocol carried it:
// the request as admitted, its walk through the middleware pipeline, the
// response headers the steps queued and the route's header-rule variables,
// the relay buffer, Sluice's own status when it answered, the upstream
// exchange, and the record of the finished exchange (metrics and the access
// log). It is the only exchange host and middleware continuation; the
// connection or stream that carries it is its client leg (RequestLeg below),
// which reads the request, frames the response and knows its socket or
// stream, nothing more.
//
// A member of its leg's owner (an HTTP/1.1 session reuses it for each of its
// requests; an HTTP/2 stream has one), kept alive by the handlers that hold
// the owner (RequestLeg::keep_alive). Used on the worker's executor only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "gateway/session/pipeline.hpp"
#include "gateway/session/request_admission.hpp"
#include "upstream/exchange/upstream_exchange.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {

class Worker;

// How a leg cuts a request that can send nothing more.
enum class CutReason {
  kInternal,  // the exchange broke off (an HTTP/2 stream: INTERNAL_ERROR)
  kCancel,    // the request body could not be read (CANCEL)
};

// The client's side of a request, as the request object sees it: the body
// source and response sink of the exchange (ClientLeg), and what only the
// connection or stream can do.
class RequestLeg : public ClientLeg {
 public:
  // The object whose lifetime the request's handlers extend.
  virtual std::shared_ptr<void> keep_alive() = 0;
  // "HTTP/1.0", "HTTP/1.1" or "HTTP/2", for the record.
  virtual std::string_view protocol() const = 0;
  // The client's connection or stream is closed (reset, gone, cut).
  virtual bool closed() const = 0;
  virtual bool draining() const = 0;
  virtual void set_deadline(Side side, std::chrono::steady_clock::duration timeout) = 0;
  // Sluice's own reply (recorded by the leg once it went or failed);
  // `close_after`: the connection cannot carry another request after it.
  virtual void send_local(LocalReply reply, bool close_after) = 0;
  // The response went whole (recorded already): the next request, or the close.
  virtual void relayed(bool keep_alive) = 0;
  // Nothing more can be sent for the request (recorded already): the client
  // connection or stream is cut.
  virtual void cut(CutReason reason) = 0;
  // The request body read timed out (a 408 is due rather than the read's error).
  virtual bool body_timed_out(boost::beast::error_code ec) const = 0;
  // The length the request declared, for the head sent upstream.
  virtual std::optional<std::uint64_t> declared_length() const = 0;
  // A pending middleware step watches the client: the leg tells the request
  // (ProxiedRequest::client_gone) if it leaves meanwhile, when it can tell.
  virtual void watch() {}
  // The watch ended (the step completed).
  virtual void unwatch() {}
  // Something was submitted that a flush sends (an HTTP/2 stream's session).
  virtual void flush() {}
  // The exchange is telling the request how it ended: what it had lent the
  // leg (a pending read's buffer, a response piece) is no longer its.
  virtual void exchange_ending() {}
  // ... and the request acted on it: an HTTP/2 stream gives the exchange's
  // state and the relay buffer back now.
  virtual void exchange_finished() {}
  // The whole request went upstream and its response head is awaited (true),
  // or it came; see ExchangeHost::awaiting_response.
  virtual void awaiting_response(bool waiting) { (void)waiting; }
  // The body's first bytes were read ahead of the decision: no read runs
  // while the steps decide, so neither does the body's deadline.
  virtual void body_read_ahead() {}
  // What this request may still read ahead of its decision, and what it
  // read: one connection's requests share a budget (HTTP/2), given back
  // when each ends.
  virtual std::size_t read_ahead_room() const { return static_cast<std::size_t>(-1); }
  virtual void read_ahead_used(std::size_t n) { (void)n; }
  // What it read ahead went upstream (or will not): no longer held for it.
  virtual void read_ahead_released() {}
  // A WebSocket tunnel's life (HTTP/1.1 only).
  virtual void tunnel_opened() {}
  virtual void tunnel_ended(bool graceful) { (void)graceful; }
  virtual void on_internal_error(std::string_view what) noexcept = 0;
};

class ProxiedRequest final : public MiddlewareLater, public ExchangeHost {
 public:
  using Clock = std::chrono::steady_clock;

  ProxiedRequest(Worker& worker, RequestLeg& leg, WorkerExecutor executor);
  ~ProxiedRequest() override;
  ProxiedRequest(const ProxiedRequest&) = delete;
  ProxiedRequest& operator=(const ProxiedRequest&) = delete;

  // The TCP peer, for the record before a head and the forwarded headers
  // (the text outlives the request).
  // The connection's client: its address, and its verified TLS client
  // certificate (null: none), which outlive the request.
  void set_peer(const IpAddress& peer, std::string_view peer_text,
                const ClientCertificate* client_cert = nullptr);
  // The config the next request is served by (the one current when it starts).
  void set_config(std::shared_ptr<const Config> config) { config_ = std::move(config); }
  // A new request's head came now.
  void start();
  // Its head was read (it stays where the leg keeps it while the request lasts).
  void set_head(const ClientRequest* head) { head_ = head; }
  // The request was admitted: the middleware, then the exchange.
  void run();

  const Config& config() const { return *config_; }
  const std::shared_ptr<const Config>& config_ptr() const { return config_; }
  RequestInfo& info() { return info_; }
  const RequestInfo& info() const { return info_; }
  const HeaderList& response_headers() const { return response_headers_; }
  UpstreamExchange& exchange() { return exchange_; }
  bool in_exchange() const { return in_exchange_; }
  unsigned local_status() const { return local_status_; }
  bool recorded() const { return recorded_; }
  // The options of the response head sent back (request id, the steps'
  // headers, the route's response rules).
  ResponseHeadOptions response_head_options() const;
  // The request id, made if admission did not get that far.
  const std::string& request_id();
  // A new request id (for a request refused before admission made one).
  const std::string& new_request_id() {
    generate_request_id(info_.request_id);
    return info_.request_id;
  }

  // The leg's local reply is being sent with `status`.
  void set_local_status(unsigned status) { local_status_ = status; }
  // Counts and logs the exchange once; `ended` (all but a WebSocket tunnel's
  // opening) runs the steps' end hooks first.
  void record(unsigned status, bool ended = true);
  // The steps' end hooks, with the status sent (Sluice's, or the upstream's).
  void end_pipeline();
  // The same when the connection closes, with the upstream's status only.
  void end_pipeline_at_close();
  // Nothing more can be sent: the exchange is recorded (`status`, or 499
  // when none went) and the leg cut.
  void abort(unsigned status, CutReason reason);
  // The client left while a step watched it: the step is told, once.
  void client_gone();
  bool watched() const { return static_cast<bool>(gone_); }
  // The watch ends (the step completed, or the response head came).
  void stop_watch();
  // Ready for the connection's next request.
  void reset();
  // The relay buffer goes back to the worker.
  void release_relay_buffer();

  // MiddlewareLater
  MiddlewareDone take() override;
  void watch_client(std::function<void()> gone) override;

  // ExchangeHost
  void set_deadline(Side side, Clock::duration timeout) override;
  bool draining() const override { return leg_.draining(); }
  bool client_closed() const override { return leg_.closed(); }
  void awaiting_response(bool waiting) override { leg_.awaiting_response(waiting); }
  void response_started() override { count_facts(); }
  void exchange_ended(const ExchangeResult& result) override;
  void read_ahead_done(boost::beast::error_code ec) override;
  std::size_t read_ahead_room() const override { return leg_.read_ahead_room(); }
  void read_ahead_used(std::size_t n) override { leg_.read_ahead_used(n); }
  void read_ahead_released() override { leg_.read_ahead_released(); }
  void tunnel_opened() override;
  void tunnel_relayed(TunnelDirection direction, std::size_t n) override;
  void tunnel_ended(bool graceful) override;
  void on_internal_error(std::string_view what) noexcept override {
    leg_.on_internal_error(what);
  }

 private:
  template <class Fn>
  auto handler(Fn fn) {
    return guarded(std::shared_ptr<ProxiedRequest>(leg_.keep_alive(), this), std::move(fn));
  }

  void run_pipeline();
  void on_middleware_outcome(std::optional<LocalReply> reply);
  void start_upstream();
  // The relay buffer, taken from the worker for the exchanges until released.
  std::span<char> relay_buffer();
  // What the exchange did on its way (attempts, retries), counted once.
  void count_facts();
  void on_request_body_failed(boost::beast::error_code ec);
  // routes[].mirror: whether this request is mirrored (taken when its
  // exchange starts), and the copy sent when the exchange has ended (the
  // body then read whole), or the route's slot given back.
  void take_mirror(ExchangeRequest& request);
  void send_mirror_copy();
  void drop_mirror(std::string_view outcome);
  // A local reply for this request (the leg closes after it when it must).
  void reply(unsigned status, std::string_view message, bool close_after);

  Worker& worker_;
  RequestLeg& leg_;
  std::shared_ptr<const Config> config_;
  const ClientRequest* head_ = nullptr;  // null until a head was read
  IpAddress peer_;
  std::string_view peer_text_;
  const ClientCertificate* client_cert_ = nullptr;
  Clock::time_point started_{Clock::now()};
  RequestInfo info_;
  Pipeline pipeline_;
  HeaderList response_headers_;
  std::string client_ip_text_;  // set for a route with header rules only
  HeaderVars header_vars_;      // what those rules' values use
  std::function<void()> gone_;  // set while a pending step watches the client
  std::unique_ptr<char[]> relay_;
  UpstreamHead upstream_head_;  // the head that goes upstream, once per exchange
  unsigned local_status_ = 0;
  bool recorded_ = false;
  bool in_exchange_ = false;
  struct PendingMirror {
    std::string route;  // holds a slot of the route's mirrors in flight
    bool body_empty = false;
    bool chunked = false;
  };
  std::optional<PendingMirror> mirror_;
  UpstreamExchange exchange_;
};

}  // namespace sluice
