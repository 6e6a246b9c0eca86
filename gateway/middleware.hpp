// The middleware interface: each middleware continues, responds, or (only an
// asynchronous one) completes later, exactly once, never from inside the call
// that started it. Observers see each finished exchange.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/body_observer.hpp"
#include "common/header_list.hpp"
#include "common/inline_function.hpp"
#include "gateway/client_ip.hpp"
#include "gateway/config/config.hpp"

namespace sluice {

struct ClientCertificate;  // gateway/tls/client_certificate.hpp

// A reply made by Sluice itself rather than by an upstream.
struct LocalReply {
  unsigned status = 500;
  std::string content_type = "application/json";  // empty: none (a reply without a body)
  std::string body;
  HeaderList headers;             // extra headers (Allow, Retry-After, ...)
  bool close_connection = false;  // close the client connection after this reply
  // A body the operator wrote (routes[].reject.body): sent exactly as written,
  // never given the trace id Sluice's own JSON replies carry.
  bool verbatim = false;
};

// How an exchange ended, for the steps that hold something until then.
struct ExchangeEnd {
  unsigned status = 0;  // the status sent to the client (0: none, it left first)
  // The route's cost_from_response header as the response carried it, in its
  // head or trailers ("" when sent twice); nullopt when none came.
  std::optional<std::string> usage;
};

// A step's hook for the end of an exchange. Its captures (an owner, a list,
// a few numbers) are kept in place, not allocated per request.
using EndHook = InlineFunction<void(const ExchangeEnd&), 80>;

// What the rate-limit step decided about a request, for the access log: the
// step fills it in, and the settlement of a cost from the response adds
// settled_cost when the exchange ends. A request no limit step looked at
// keeps "none" and empty fields.
struct DecisionRecord {
  // allowed, limited, shadow_limited, delayed, exempt, fail_open,
  // fail_closed, fail_local or none.
  std::string_view decision = "none";
  std::string consumer;  // the store's id, or a key's fingerprint; empty: no key
  std::string plan;      // the plan whose limits applied; empty: no limit step
  std::string limit;     // the limit that denied, else the most restrictive; empty: none
  std::optional<double> remaining;     // that limit's remaining units
  std::optional<double> cost;          // the units the request was charged at admission
  std::optional<double> settled_cost;  // its real cost, settled from the response
  // For the request's trace (traced: its spans are recorded): when the
  // limiter was asked and answered (unset: it was not), who answered
  // ("redis", "lease", "deny_cache", "fallback" or "none": Redis failed and
  // the route failed open or closed), and the limits decided, joined by ",".
  bool traced = false;
  std::chrono::steady_clock::time_point asked{};
  std::chrono::steady_clock::time_point answered{};
  std::string_view answered_by;
  std::string limits;
};

// What a verified credential (a JSON Web Token) says of the caller: set by
// the authentication step, read by the limiter (identity and jwt: keys) and
// by the request sent upstream (forwarded claims). Not verified: nothing.
struct VerifiedCaller {
  bool verified = false;
  std::string consumer;  // the consumer claim's value; empty: none
  std::string plan;      // the plan it maps to (a known plan); empty: the default
  std::string org;       // the organisation claim's value; empty: none
  // The values of the claims the configuration reads (auth.claim_paths), by
  // path; a claim the token lacks is absent.
  // Shared with the worker's cache of verified tokens; null: none.
  std::shared_ptr<const std::vector<std::pair<std::string, std::string>>> claims;

  const std::string* claim(std::string_view path) const {
    if (!claims) return nullptr;
    for (const auto& [p, v] : *claims) {
      if (p == path) return &v;
    }
    return nullptr;
  }
  void clear() {
    verified = false;
    consumer.clear();
    plan.clear();
    org.clear();
    claims.reset();
  }
};

// What the middleware sees of a request. Header values are looked up by name
// (case-insensitive): `header` gives the first line of a header, and
// `header_count` how many lines of it there are. The views stay valid until
// the request completes.
struct RequestContext {
  std::shared_ptr<const Config> config;
  const RouteConfig* route = nullptr;
  std::string_view method;
  std::string_view target;
  std::string_view route_path;  // the normalized path without ";parameters" (request_target.hpp)
  std::function<std::optional<std::string_view>(std::string_view)> header;
  std::function<std::size_t(std::string_view)> header_count;
  IpAddress client_ip;
  std::string request_id;
  std::chrono::steady_clock::time_point started;
  HeaderList response_headers;  // added to whatever response goes back (upstream or local)
  // X-Consumer-Id / X-Consumer-Plan for the request sent upstream, as the
  // rate-limit step identified the caller (the client's own lines of those
  // names are never forwarded).
  HeaderList identity_headers;
  // Called once, in order, when the exchange ends, however it ends: its
  // response sent, its WebSocket tunnel closed, the client or the upstream
  // gone, the connection closed (a drain, an error), or the session gone. A
  // step that registers one after the end (its decision came back after the
  // client left) has it called when the session lets the request go.
  std::vector<EndHook> on_end;
  DecisionRecord decision;
  // On a route that reads members of its request body (RouteConfig::
  // reads_request_body), the body's first bytes, read before the steps ran
  // (up to routes[].max_inspect_bytes); empty otherwise. Its whole length:
  // read to its end, or declared (Content-Length); else the bytes read.
  std::string_view request_body;
  std::optional<std::uint64_t> request_body_length;
  // Reads the response body as it passes to the client (a step that settles
  // the cost from it); null: none. Kept until the next request begins, so an
  // end hook may read what it found.
  std::unique_ptr<BodyObserver> response_observer;
  VerifiedCaller caller;
  // The connection's verified client certificate; null: none. Valid while
  // the request is.
  const ClientCertificate* client_cert = nullptr;
};

// One attempt at an upstream server, for a recorded trace.
struct AttemptTrace {
  std::string server;         // "host:port"
  std::string_view protocol;  // "http1", "h2c" or "h2"
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point ended;
  std::string_view outcome;  // as sluice_upstream_requests_total counts it
  unsigned status = 0;       // the server's status, 0: none
};

// What a recorded trace needs of a finished exchange besides the summary.
struct TraceFacts {
  std::string_view span_id;         // Sluice's span for the request
  std::string_view parent_span_id;  // the client's span; empty: the trace started here
  std::string_view scheme;          // "http" or "https"
  std::string_view upstream;        // the upstream's name; empty: none was asked
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point ended;
  std::vector<AttemptTrace> attempts;
};

// What is known of a finished exchange (for the access log and the like).
struct ExchangeSummary {
  std::string_view route;  // empty when no route matched
  std::string_view method;
  std::string_view protocol;  // "HTTP/1.0", "HTTP/1.1" or "HTTP/2"; empty without a head
  std::string_view target;    // as received
  unsigned status = 0;
  IpAddress client_ip;
  std::string_view request_id;
  std::string_view trace_id;  // the W3C trace id (32 hex digits); empty without a head
  std::string_view upstream_server;  // "host:port", empty for local replies
  std::size_t attempts = 0;          // attempts at upstream servers (0: none)
  std::string_view servers_tried;    // their servers in order, "host:port" joined with ","
  double duration_seconds = 0;
  bool local = false;  // answered by Sluice itself
  const DecisionRecord* decision = nullptr;  // null: no request head was read
  const TraceFacts* trace = nullptr;         // null: the request's trace is not recorded
};

// What a middleware decided about a request.
enum class MiddlewareStep {
  kContinue,  // go on with the next middleware (or the upstream)
  kRespond,   // answer with `reply` instead of going upstream
  kPending,   // decided later, through the completion taken from MiddlewareLater
};

struct MiddlewareResult {
  MiddlewareStep step = MiddlewareStep::kContinue;
  std::optional<LocalReply> reply;  // set with kRespond only

  static MiddlewareResult next() { return {}; }
  static MiddlewareResult respond(LocalReply r) { return {MiddlewareStep::kRespond, std::move(r)}; }
  static MiddlewareResult pending() { return {MiddlewareStep::kPending, std::nullopt}; }
};

// The completion of an asynchronous middleware: continue (nullopt) or answer
// with a reply. Move-only; a session's completion (its owner and a small
// callable) is kept in place.
using MiddlewareDone = InlineFunction<void(std::optional<LocalReply>), 32>;

// Handed to on_request; only a middleware that goes asynchronous asks it for
// its completion, so a synchronous outcome costs no completion object.
class MiddlewareLater {
 public:
  virtual ~MiddlewareLater() = default;
  // The completion of this request's step. Taken at most once per on_request,
  // by a middleware that then returns kPending, or that finds it can answer
  // at once after all: it then drops the completion uncalled and returns its
  // outcome.
  virtual MiddlewareDone take() = 0;
  // While the step that took the completion is pending: `gone` is called once,
  // on the worker's executor, if the client closes its connection before the
  // completion is called (which must still be called; its outcome is then
  // dropped). A session that cannot tell ignores it.
  virtual void watch_client(std::function<void()> gone) { (void)gone; }
};

// One step of the request path. Called on the worker's executor. A synchronous
// middleware returns kContinue or kRespond at once, with nothing posted. An
// asynchronous one takes its completion from `later`, returns kPending and
// calls the completion exactly once, later, on the worker's executor, and
// never from inside on_request. A middleware with nothing to do for a request
// returns kContinue.
class Middleware {
 public:
  virtual ~Middleware() = default;
  virtual MiddlewareResult on_request(RequestContext& ctx, MiddlewareLater& later) = 0;
};

// Told of every finished exchange (the access log and the like), routed or
// not, once the response has been sent or the exchange abandoned. Called on
// the worker's executor; it cannot change the exchange.
class ExchangeObserver {
 public:
  virtual ~ExchangeObserver() = default;
  // Whether on_exchange would do anything with an exchange whose trace is
  // recorded or not: when no observer would, no summary is made.
  virtual bool wants(const Config& /*config*/, bool /*trace_recorded*/) const { return true; }
  virtual void on_exchange(const Config& config, const ExchangeSummary& summary) = 0;
};

// What a worker runs around each exchange: the middleware in order, then the
// observers once it is over.
struct MiddlewareChain {
  std::vector<std::shared_ptr<Middleware>> steps;
  std::vector<std::shared_ptr<ExchangeObserver>> observers;

  bool empty() const { return steps.empty() && observers.empty(); }
  void clear() {
    steps.clear();
    observers.clear();
  }
};

}  // namespace sluice
