// What an upstream exchange (upstream_exchange.hpp) is asked to do, what it
// needs of the client connection it serves (its host), and how it tells the
// host it ended. Plain declarations, apart from the exchange itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/verb.hpp>

#include "common/body_observer.hpp"
#include "upstream/exchange/tunnel.hpp"
#include "upstream/request_head.hpp"
#include "upstream/retry/retry_policy.hpp"
#include "upstream/upstream_config.hpp"
#include "upstream/upstream_error.hpp"

namespace sluice {

// Whose operation the client connection's one I/O deadline guards.
enum class Side { kClient, kUpstream };

// How an exchange ended: what its host is told, once.
struct ExchangeResult {
  enum class End {
    kRelayed,            // the response reached the client whole
    kUpstreamFailed,     // no response byte sent yet: the client gets a local reply
    kRequestBodyFailed,  // reading the request body failed (the upstream connection is dropped)
    kAborted,            // nothing can be sent any more: cut the client connection
  };
  End end = End::kAborted;
  unsigned status = 0;                    // the upstream's status (0: none came, or it was void)
  UpstreamError error{};                  // kUpstreamFailed: why
  boost::beast::error_code body_error;    // kRequestBodyFailed: the read's error
  bool client_keep_alive = false;         // kRelayed: the client connection stays open
  bool upstream_reused = false;           // its last attempt's connection came from the pool
};

// What an exchange needs of the client connection it serves, and tells it
// (what it did on the way, its attempts and retries, are facts the host takes:
// take_facts). Called on the worker's executor; an end found at once (no server to try)
// is reported from inside UpstreamExchange::start. An upgraded exchange
// becomes a tunnel, which reports to the same host.
class ExchangeHost : public TunnelHost {
 public:
  virtual void set_deadline(Side side, std::chrono::steady_clock::duration timeout) = 0;
  virtual bool draining() const = 0;
  virtual bool client_closed() const = 0;
  // The request went whole and its response head is awaited (true), or the
  // head came (false). Meanwhile a host that can tell watches the client
  // connection, and aborts the exchange (exchange_aborted) as soon as the
  // client closes it, so that nothing is held for a client that left.
  virtual void awaiting_response(bool waiting) { (void)waiting; }
  // A server answered: its response head is about to go to the client. The
  // attempts noted so far may be taken (take_facts) and counted now, so that
  // whoever reads the metrics once the response is in sees them; what happens
  // after (a body cut short) is taken at the end.
  virtual void response_started() {}

  // A read_ahead ended: the body's first bytes are kept, or reading them
  // failed (`ec`: the client left, sent a broken body, or took too long).
  virtual void read_ahead_done(boost::beast::error_code ec) { (void)ec; }
  // How much more of the body may be read ahead (a connection's budget its
  // requests share), and what a read ahead took.
  virtual std::size_t read_ahead_room() const { return static_cast<std::size_t>(-1); }
  virtual void read_ahead_used(std::size_t n) { (void)n; }
  // What was read ahead went upstream, or the request ended: no longer held.
  virtual void read_ahead_released() {}

  // How it ended, with the upstream connection pooled or dropped already.
  virtual void exchange_ended(const ExchangeResult& result) = 0;
  // The upstream accepted the WebSocket upgrade: the 101 is about to go and
  // the connection becomes a tunnel, which ends with tunnel_ended.
  virtual void tunnel_opened() = 0;
};

// What the exchange is asked to do; the views outlive it.
struct ExchangeRequest {
  const UpstreamConfig* upstream = nullptr;
  // The head that goes upstream, prepared once (written for the upstream's
  // protocol on the first connection; a retry reuses it).
  const UpstreamHead* head = nullptr;
  // The relay buffer, lent until reset(): request body and response pieces
  // go through it.
  std::span<char> relay;
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::chrono::milliseconds send_timeout{};  // a write to the client (a tunnel's)
  bool chunked = false;                      // the request body goes upstream chunked
  bool body_empty = false;                   // the request has no body at all
  bool websocket = false;                    // a WebSocket handshake (see RequestInfo)
  std::chrono::milliseconds tunnel_idle_timeout{};  // an upgraded connection's idle timeout
  // A response header (or trailer) whose value the host wants at the end
  // (usage()); empty: none.
  std::string_view usage_header;
  // Reads the response body as it is relayed (cost_from_response.body);
  // null: none. Outlives the exchange.
  BodyObserver* observer = nullptr;
  // How long the whole exchange may take (a gRPC call's grpc-timeout); every
  // upstream wait ends by then. Zero: no bound beyond the upstream's timeouts.
  std::chrono::milliseconds deadline{};
  // How long the upstream may take to the response head and between reads
  // (a route's idle_timeout_ms). Zero: the upstream's response_timeout.
  std::chrono::milliseconds response_timeout{};
  // The request's key when the upstream balances by hash (upstreams.NAME.
  // hash_on, read by the host); none: the request lacks it.
  std::optional<std::uint64_t> hash_key;
  // The route's retry policy (routes[].retry); null: only the built-in
  // retries of retry_rule.hpp.
  const RetryPolicy* retry = nullptr;
  // Keep the request body up to this many bytes (a mirror sends it too:
  // UpstreamExchange::kept_body); 0: only what a retry needs.
  std::size_t keep_body = 0;
  // The attempts count for the servers' outlier detection (a mirror's copies do not).
  bool counts_for_servers = true;
};

}  // namespace sluice
