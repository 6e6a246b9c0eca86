// One exchange with an upstream: pick a server, take a pooled connection or
// connect (within connect_timeout, resolving a host name if need be), the
// retry rule, the request's deadline and the one end told to the host. The
// request (head, 100 Continue, body) goes from the client leg (client_leg.hpp:
// an HTTP/1.1 connection or an HTTP/2 stream) and the response (head, body)
// back to it through the relay buffer by the leg of the upstream's protocol
// (upstream_leg.hpp: http1_leg.hpp, h2_leg.hpp); a connection goes back to
// the pool after a complete keep-alive exchange.
//
// One per client request stream, reused by its requests, living inside the
// object that owns the client leg (its host). Every handler runs on the
// worker's executor through guarded(), holding the host alive by an aliasing
// shared_ptr. The exchange ends with exactly one call to the host,
// exchange_ended, with its result: relayed, upstream failed (nothing of the
// response sent yet: a local reply), request body failed, or aborted.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/verb.hpp>

#include "common/guarded.hpp"
#include "common/http_limits.hpp"
#include "upstream/byte_stream.hpp"
#include "upstream/exchange/client_leg.hpp"
#include "upstream/exchange/exchange_host.hpp"
#include "upstream/exchange/exchange_facts.hpp"
#include "upstream/exchange/framing.hpp"
#include "upstream/exchange/h2_leg.hpp"
#include "upstream/exchange/http1_leg.hpp"
#include "upstream/exchange/replay_leg.hpp"
#include "upstream/exchange/retry_rule.hpp"
#include "upstream/exchange/tunnel.hpp"
#include "upstream/exchange/upstream_leg.hpp"
#include "upstream/h2/h2_head.hpp"
#include "upstream/header_rules.hpp"
#include "upstream/http_fields.hpp"
#include "upstream/request_head.hpp"
#include "upstream/retry/retry_budget.hpp"
#include "upstream/retry/retry_policy.hpp"
#include "upstream/upstream_error.hpp"
#include "upstream/upstream_pool.hpp"

namespace sluice {

class UpstreamExchange {
 public:
  UpstreamExchange(ExchangeHost& host, ClientLeg& client, WorkerExecutor executor,
                   UpstreamPools& pools)
      : host_(host),
        real_client_(client),
        replay_(*this),
        client_(&client),
        executor_(std::move(executor)),
        pools_(pools),
        http1_(*this),
        h2_(*this) {}
  ~UpstreamExchange();
  UpstreamExchange(const UpstreamExchange&) = delete;
  UpstreamExchange& operator=(const UpstreamExchange&) = delete;

  // Starts the exchange of a request whose head the client leg has read.
  // `self` is this object, sharing ownership with its host.
  void start(const ExchangeRequest& request, const std::shared_ptr<UpstreamExchange>& self);

  // The client leg's operations completed (see client_leg.hpp): the leg of
  // the attempt under way takes them; after the end, nobody does.
  void on_body_read(boost::beast::error_code ec, std::size_t n) {
    if (!ec && client_ == &replay_) replay_.keep(request_.relay.data(), n);
    if (reading_ahead_) {
      if (!ec) host_.read_ahead_used(n);
      return read_ahead_step(ec);
    }
    if (leg_) leg_->on_body_read(ec, n);
  }
  void on_continue_sent(boost::beast::error_code ec) {
    if (reading_ahead_) return read_ahead_step(ec);
    if (leg_) leg_->on_continue_sent(ec);
  }

  // Reads the request body ahead of the exchange, before the request is
  // decided (a route that reads fields of its body): into `relay`, and kept,
  // until `max_bytes` are or the body ended (a client waiting for "100
  // Continue" gets it first); then the host's read_ahead_done. The exchange
  // started next sends the kept bytes first and reads the rest from the
  // client after them (the kept bytes may go once they went upstream).
  void read_ahead(std::span<char> relay, std::size_t max_bytes);
  // What read_ahead kept: the body's first bytes, or all of it.
  std::string_view read_ahead_bytes() const { return replay_.kept(); }
  void on_response_sent(boost::beast::error_code ec) {
    if (leg_) leg_->on_response_sent(ec);
  }

  // The deadline passed on the upstream side: the connection is closed.
  void on_upstream_deadline();

  // Closes the upstream connection's socket, failing what is pending on it
  // (a tunnel's too: it ends).
  void close_upstream_socket();
  // Closes the upstream connection, if any, and lets it go; nothing more is relayed.
  void drop_upstream();
  // Stops waiting for a free connection slot.
  void cancel_wait();
  // Ends the exchange's state: the response parser is freed and the relay
  // buffer no longer used.
  void reset();

  // The status the upstream answered with (0: none), and by which server.
  unsigned upstream_status() const { return upstream_status_; }
  // The request's usage_header as the response carried it: in its head, or
  // in its trailers once the body has ended whole (a trailer replaces
  // nothing: a header sent twice, in either place, is "" like any invalid
  // value). nullopt while none came.
  const std::optional<std::string>& usage() const { return usage_; }
  std::string_view upstream_server() const { return upstream_server_; }
  // The attempts made at servers (0: none was), and the servers they went
  // to, in order, as "host:port" joined with ",".
  std::size_t attempts() const { return attempts_.size(); }
  std::span<const AttemptRecord> attempt_records() const { return attempts_; }
  std::string servers_tried() const;
  // The whole request body, when it was read to its end and kept
  // (ExchangeRequest::keep_body); none otherwise.
  std::optional<std::string_view> kept_body() const {
    if (client_ != &replay_ || !replay_.replayable() || !real_client_.body_done()) {
      return std::nullopt;
    }
    return replay_.kept();
  }
  // Its attempts and retries noted since the last take, handed over once
  // (later attempts are noted afresh, for the same upstream).
  ExchangeFacts take_facts() {
    ExchangeFacts taken = std::exchange(facts_, ExchangeFacts{});
    facts_.upstream = taken.upstream;
    return taken;
  }
  const ExchangeFacts& facts() const { return facts_; }

  void on_internal_error(std::string_view what) noexcept { host_.on_internal_error(what); }

 private:
  // The legs are parts of the exchange: they ask it for the request, the
  // server, the connection, the retry rule and the end (below).
  friend class Http1Leg;
  friend class H2Leg;
  friend class ReplayLeg;
  using Clock = std::chrono::steady_clock;

  // A dropped connection whose operation has not ended, with what that
  // operation may still use.
  struct Dropped {
    std::uint64_t generation;
    std::unique_ptr<UpstreamConnection> connection;
    Http1Leg::ParserStorage parser;
  };
  // Waiting for a connection slot at a server that has max_connections.
  struct SlotWait {
    std::unique_ptr<ExchangeTimer> timer;
    std::uint64_t generation = 0;
    Clock::time_point deadline{};  // set once per exchange
    bool waiting = false;
  };
  // A host name being resolved (rare: connections are pooled), within connect_timeout.
  struct Resolving {
    std::unique_ptr<boost::asio::ip::tcp::resolver> resolver;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  // How far the exchange has got with the client, whichever the upstream's protocol.
  enum class Progress {
    kNew,             // the request head is not written yet
    kHeadReady,       // a leg holds it written (a retry reuses it)
    kContinueOwed,    // ... and the client waits for the 100 Continue Sluice owes it
    kResponseStarted  // something of the response went to the client leg
  };

  template <class Fn>
  auto handler(Fn fn);
  // The handler of an operation on upstream_'s stream or buffer (one at a
  // time). If the connection is dropped meanwhile, the operation still holds
  // them: the connection is kept until it ends, and fn is not called.
  template <class Fn>
  auto upstream_handler(Fn fn);
  void release_dropped(std::uint64_t generation);

  // ---- Choose, connect (upstream_connect.cpp) ----
  void try_next_server();
  // An attempt at `server` (an index into the upstream's servers).
  void start_attempt(std::size_t server);
  // An HTTP/1.1 attempt: a pooled connection, or a new one, then the leg sends.
  void connect_http1();
  void connect_fresh();
  void resolve(const HostPort& server);
  void wait_for_connection();
  bool take_slot(std::uint64_t generation);
  bool waits(std::uint64_t generation) const;  // still waiting for that slot
  void connect_to(std::vector<boost::asio::ip::tcp::endpoint> endpoints);
  void on_connect(boost::beast::error_code ec);
  void start_tls();
  void on_tls_handshake(boost::beast::error_code ec);
  void connect_failed(std::string_view what, const std::string& reason, UpstreamOutcome outcome,
                      UpstreamError error);
  void keep_tls_session();

  // ---- What the legs share ----
  // The request starts going upstream: the client may then be owed a 100
  // Continue. False when it had started already (a retry on another
  // connection reuses the head written then).
  bool begin_request();
  // Reads the next piece of the request body into the relay buffer.
  void read_client_body();
  // Hands the client leg the response head (and the request's observer).
  void start_response(const ResponseStart& start);
  // Hands the client leg a piece of the response (the head alone: n == 0).
  void send_response(const char* data, std::size_t n, bool last);
  // An attempt's outcome: among the facts, and, for the server it was at,
  // to outlier detection (kOk by the status answered) unless `to_server` is
  // false (another stream reports the same connection's failure), the
  // outcome is not the server's doing, or the request's own deadline ran out.
  void note_attempt(UpstreamOutcome outcome, bool to_server = true);
  // A server answered this attempt with a response head (not 1xx): noted as
  // the attempt's outcome, and told to the host.
  void answered();
  // Takes request_.usage_header's value from `fields` (head, or head and trailers).
  void note_usage(const HttpFields& fields);
  // The same from a head and its trailers kept apart (an HTTP/2 response).
  void note_usage_trailers(const HttpFields& head,
                           const HttpFields& trailers);
  // `timeout`, cut short by the request's deadline.
  Clock::duration upstream_timeout(Clock::duration timeout) const;
  // The response timeout of this exchange: the request's, else the upstream's.
  Clock::duration response_timeout() const {
    return request_.response_timeout.count() > 0 ? Clock::duration(request_.response_timeout)
                                                 : Clock::duration(upstream_cfg_->response_timeout);
  }

  // The next read of a read_ahead, or its end.
  void read_ahead_step(boost::beast::error_code ec);
  // The body read ahead went upstream whole: its bytes are no longer held
  // for the connection's budget.
  void read_ahead_replayed() { host_.read_ahead_released(); }

  // ---- The retry rule, the end ----
  // What the retry rule needs to know of any failed attempt at this request.
  FailedAttempt attempt(FailedAttempt::Stage stage) const;
  // The retry rule said `how` (not kNo): the request goes again.
  void retry(Retry how);
  // The route's retry policy (request_.retry) on a failed attempt: true when
  // the request goes again (after a backoff), within the policy's attempts
  // and the upstream's budget, to a server not tried yet if one is up.
  bool retry_by_policy(RetryCause cause);
  // A response head with `status` came (the leg set upstream_status_): true
  // when the policy retries it instead (the response is dropped unread).
  bool retry_answer(const HttpFields& head);
  void on_backoff(std::uint64_t generation);
  // The route's policy decides this failure alone (the built-in retry of a
  // failed connect then makes no second try of its own).
  bool policy_owns(RetryCause cause) const {
    return request_.retry && request_.retry->retries(cause);
  }
  // The whole request went on this attempt: its per_try_timeout starts.
  void request_sent() {
    if (request_.retry && request_.retry->per_try_timeout.count() > 0) {
      attempt_deadline_ = Clock::now() + request_.retry->per_try_timeout;
    }
  }
  // The request is over for the upstream's retry budget.
  void leave_retry_budget();
  // An HTTP/1.1 connection failed with `ec`: the retry rule, else the end.
  void io_failed(boost::beast::error_code ec);
  FailedAttempt failed_exchange(boost::beast::error_code ec, bool timed_out) const;
  // Tells the host how the exchange ended (once).
  void end(LegEnd how, UpstreamError error = {}, boost::beast::error_code ec = {});
  void fail(UpstreamError error) { end(LegEnd::kUpstreamFailed, error); }
  // Nothing more can be relayed: the upstream connection is dropped and the
  // host cuts the client connection.
  void abort();

  ExchangeHost& host_;
  ClientLeg& real_client_;
  // Under a retry policy the legs read the body through replay_, which keeps
  // it for a retry; otherwise from the client leg itself.
  ReplayLeg replay_;
  bool reading_ahead_ = false;  // read_ahead's reads are under way
  bool read_ahead_ = false;     // replay_ holds a body read ahead, for start()
  std::size_t read_ahead_max_ = 0;
  ClientLeg* client_;
  WorkerExecutor executor_;
  UpstreamPools& pools_;
  std::weak_ptr<UpstreamExchange> self_;
  ExchangeRequest request_;  // request_.relay: the relay buffer
  ExchangeFacts facts_;
  const UpstreamConfig* upstream_cfg_ = nullptr;
  std::vector<std::size_t> tried_;
  std::vector<AttemptRecord> attempts_;  // every attempt, in order
  std::size_t server_index_ = 0;
  InFlight in_flight_;  // the attempt under way, counted at its server
  Clock::time_point deadline_at_ = Clock::time_point::max();  // the request's deadline

  // The HTTP/1.1 connection being connected or used (see upstream_handler).
  std::unique_ptr<UpstreamConnection> upstream_;
  bool upstream_busy_ = false;  // an operation on upstream_ is in flight
  // Dropped connections whose operation has not ended yet, by generation;
  // upstream_generation_ is that of upstream_'s operations.
  std::vector<Dropped> dropped_;
  std::uint64_t upstream_generation_ = 0;
  Resolving resolving_;
  SlotWait slot_;

  std::string req_head_;  // the request head as HTTP/1.1 text; its capacity is reused
  Progress progress_ = Progress::kNew;
  std::string upstream_server_;
  unsigned upstream_status_ = 0;
  std::optional<std::string> usage_;
  bool upstream_timed_out_ = false;
  // Why the last connect (or TLS handshake) failed, for the reply when no
  // server is left to try.
  UpstreamError last_connect_error_ = UpstreamError::kConnectFailed;
  bool upstream_reused_ = false;  // the attempt's connection came from the pool
  bool retried_on_fresh_ = false;
  std::size_t h2_refused_ = 0;  // HTTP/2 streams the server refused for this request

  // Under a retry policy: the upstream's budget on this worker (null: none
  // counted), whether a retry of this request holds it, the retries the
  // policy made, the server and the timer of the next attempt, and the end
  // of the attempt's own wait for a response head (per_try_timeout).
  RetryBudget* budget_ = nullptr;
  bool retry_keeps_body_ = false;  // the policy may send this request again
  bool retry_held_ = false;
  unsigned policy_retries_ = 0;
  std::size_t next_server_ = 0;
  std::unique_ptr<ExchangeTimer> backoff_timer_;
  std::uint64_t backoff_generation_ = 0;
  bool backing_off_ = false;  // between two attempts
  Clock::time_point attempt_deadline_ = Clock::time_point::max();

  // One leg per upstream protocol; leg_ is the one of the attempt under way
  // (null once the exchange ended: what the client leg completes after that
  // is not the exchange's).
  Http1Leg http1_;
  H2Leg h2_;
  UpstreamLeg* leg_ = nullptr;
};

// Completion handlers go through guarded(): an exception ends the client
// connection, never the worker.
template <class Fn>
auto UpstreamExchange::handler(Fn fn) {
  return guarded(self_.lock(), std::move(fn));
}

template <class Fn>
auto UpstreamExchange::upstream_handler(Fn fn) {
  // Parking one connection per generation needs one operation at a time.
  if (upstream_busy_) throw std::logic_error("two operations in flight on an upstream connection");
  upstream_busy_ = true;
  return handler([fn = std::move(fn), generation = upstream_generation_](UpstreamExchange& self,
                                                                         auto&&... args) mutable {
    if (generation != self.upstream_generation_) return self.release_dropped(generation);
    self.upstream_busy_ = false;
    fn(self, std::forward<decltype(args)>(args)...);
  });
}

// The legs' handlers are the exchange's, handing the leg its completion.
template <class Fn>
auto Http1Leg::handler(Fn fn) {
  return x_.upstream_handler([fn = std::move(fn)](UpstreamExchange& x, auto&&... args) mutable {
    fn(x.http1_, std::forward<decltype(args)>(args)...);
  });
}

template <class Fn>
auto H2Leg::handler(Fn fn) {
  return x_.handler([fn = std::move(fn)](UpstreamExchange& x, auto&&... args) mutable {
    fn(x.h2_, std::forward<decltype(args)>(args)...);
  });
}

}  // namespace sluice
