// The upstream leg of one exchange: pick a server, take a pooled connection
// or connect (within connect_timeout, resolving a host name if need be), the
// retry rule, relay the request (head, 100 Continue, body) from the client leg
// (client_leg.hpp: an HTTP/1.1 connection or an HTTP/2 stream) and the
// response (head, body) back to it through the relay buffer, and give the
// connection back to the pool after a complete keep-alive exchange.
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
#include "upstream/exchange/framing.hpp"
#include "upstream/exchange/retry_rule.hpp"
#include "upstream/exchange/tunnel.hpp"
#include "upstream/exchange/upstream_error.hpp"
#include "upstream/h2/h2_head.hpp"
#include "upstream/header_rules.hpp"
#include "upstream/upstream_pool.hpp"

namespace sluice {

class H2Connection;
struct H2Stream;

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

// What an exchange needs of the client connection it serves, and tells it.
// Called on the worker's executor; an end found at once (no server to try)
// is reported from inside UpstreamExchange::start. An upgraded exchange
// becomes a tunnel, which reports to the same host.
class ExchangeHost : public TunnelHost {
 public:
  virtual void set_deadline(Side side, std::chrono::steady_clock::duration timeout) = 0;
  // The relay buffer, lent until reset() (asked at most once per exchange).
  virtual std::span<char> relay_buffer() = 0;
  // The request head as sent upstream, serialized once per exchange.
  virtual void serialize_request_head(std::string& out, std::string_view upstream_host) = 0;
  virtual bool draining() const = 0;
  virtual bool client_closed() const = 0;
  // The request went whole and its response head is awaited (true), or the
  // head came (false). Meanwhile a host that can tell watches the client
  // connection, and aborts the exchange (exchange_aborted) as soon as the
  // client closes it, so that nothing is held for a client that left.
  virtual void awaiting_response(bool waiting) { (void)waiting; }
  // Metrics: an upstream exchange by outcome, a new connection, a retry.
  virtual void count_upstream(const UpstreamConfig& upstream, UpstreamOutcome outcome) = 0;
  virtual void count_connection(const UpstreamConfig& upstream) = 0;
  virtual void count_retry() = 0;

  // How it ended, with the upstream connection pooled or dropped already.
  virtual void exchange_ended(const ExchangeResult& result) = 0;
  // The upstream accepted the WebSocket upgrade: the 101 is about to go and
  // the connection becomes a tunnel, which ends with tunnel_ended.
  virtual void tunnel_opened() = 0;
};

// What the exchange is asked to do; the views outlive it.
struct ExchangeRequest {
  const UpstreamConfig* upstream = nullptr;
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::chrono::milliseconds send_timeout{};  // a write to the client (a tunnel's)
  bool chunked = false;                      // the request body goes upstream chunked
  bool body_empty = false;                   // the request has no body at all
  bool websocket = false;                    // a WebSocket handshake (see RequestInfo)
  std::chrono::milliseconds tunnel_idle_timeout{};  // an upgraded connection's idle timeout
  // A response header (or trailer) whose value the host wants at the end
  // (usage()); empty: none.
  std::string_view usage_header;
  // How long the whole exchange may take (a gRPC call's grpc-timeout); every
  // upstream wait ends by then. Zero: no bound beyond the upstream's timeouts.
  std::chrono::milliseconds deadline{};
};

class UpstreamExchange {
 public:
  UpstreamExchange(ExchangeHost& host, ClientLeg& client, WorkerExecutor executor,
                   UpstreamPools& pools)
      : host_(host), client_(client), executor_(std::move(executor)), pools_(pools) {}
  ~UpstreamExchange();
  UpstreamExchange(const UpstreamExchange&) = delete;
  UpstreamExchange& operator=(const UpstreamExchange&) = delete;

  // Starts the exchange of a request whose head the client leg has read.
  // `self` is this object, sharing ownership with its host.
  void start(const ExchangeRequest& request, const std::shared_ptr<UpstreamExchange>& self);

  // The client leg's operations completed (see client_leg.hpp).
  void on_body_read(boost::beast::error_code ec, std::size_t n);
  void on_continue_sent(boost::beast::error_code ec);
  void on_response_sent(boost::beast::error_code ec);

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

  void on_internal_error(std::string_view what) noexcept { host_.on_internal_error(what); }

 private:
  using Clock = std::chrono::steady_clock;
  using Timer =
      boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, WorkerExecutor>;
  using ResponseParser = boost::beast::http::response_parser<boost::beast::http::buffer_body>;
  using ParserStorage = std::unique_ptr<std::optional<ResponseParser>>;

  // The response parser, in storage of its own that is made once: a read in
  // flight on a dropped connection still holds the parser, which then goes
  // with the connection (see dropped_).
  class ParserSlot {
   public:
    ResponseParser* operator->() { return &**storage_; }
    const ResponseParser* operator->() const { return &**storage_; }
    ResponseParser& operator*() { return **storage_; }
    explicit operator bool() const { return storage_ && storage_->has_value(); }
    void emplace() {
      if (!storage_) storage_ = std::make_unique<std::optional<ResponseParser>>();
      storage_->emplace();
    }
    void reset() {
      if (storage_) storage_->reset();
    }
    ParserStorage release() { return std::move(storage_); }

   private:
    ParserStorage storage_;
  };
  // A dropped connection whose operation has not ended, with what that
  // operation may still use.
  struct Dropped {
    std::uint64_t generation;
    std::unique_ptr<UpstreamConnection> connection;
    ParserStorage parser;
  };

  template <class Fn>
  auto handler(Fn fn);
  // The handler of an operation on upstream_'s stream or buffer (one at a
  // time). If the connection is dropped meanwhile, the operation still holds
  // them: the connection is kept until it ends, and fn is not called.
  template <class Fn>
  auto upstream_handler(Fn fn);
  void release_dropped(std::uint64_t generation);

  void try_next_server();
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
  void send_request_head();
  // Writes the request head if still pending, then `n` body bytes (and the
  // last chunk when `last` and chunked) upstream, in one write.
  template <class Handler>
  void write_upstream(const char* data, std::size_t n, bool last, Handler&& handler);
  void on_request_head_sent(boost::beast::error_code ec);
  void read_client_body();
  void on_upstream_body_written(boost::beast::error_code ec);
  void read_response_head();
  void on_response_head(boost::beast::error_code ec);
  void read_upstream_body();
  void on_upstream_body(boost::beast::error_code ec);
  void send_response(const char* data, std::size_t n, bool last);
  void relay_trailers();
  void finish();
  // Tells the host how the exchange ended (once).
  void end(ExchangeResult::End how, UpstreamError error = {}, boost::beast::error_code ec = {});
  void fail(UpstreamError error) { end(ExchangeResult::End::kUpstreamFailed, error); }
  // Takes request_.usage_header's value from `fields` (head, or head and trailers).
  void note_usage(const boost::beast::http::fields& fields);
  // The same from a head and its trailers kept apart (an HTTP/2 response).
  void note_usage_trailers(const boost::beast::http::fields& head,
                           const boost::beast::http::fields& trailers);
  void start_tunnel();
  void io_failed(boost::beast::error_code ec);
  // Nothing more can be relayed: the upstream connection is dropped and the
  // host cuts the client connection.
  void abort();
  FailedAttempt failed_exchange(boost::beast::error_code ec, bool timed_out) const;
  // `timeout`, cut short by the request's deadline.
  Clock::duration upstream_timeout(Clock::duration timeout) const;

  // ---- An HTTP/2 upstream (upstream_h2.cpp): a stream on a shared connection ----
  // The request body's relay, and the response's.
  // kContinuing: the client is being told 100 Continue (a write on its leg,
  // no read), then the body is read.
  enum class H2Request {
    kWaitingForConnection,
    kContinuing,
    kReading,
    kSending,
    kCancelling,
    kDone
  };
  enum class H2Response { kAwaitingHead, kRelaying, kSending, kDone };
  void start_h2();
  void open_h2_stream();
  void post_h2_progress();
  void h2_progress();
  void h2_start_body();
  void h2_continue_sent(boost::beast::error_code ec);
  void h2_body_read(boost::beast::error_code ec, std::size_t n);
  void h2_head();
  void h2_relay();
  void h2_response_sent(boost::beast::error_code ec);
  void h2_stream_failed();
  void h2_connect_failed();
  // Ends the exchange once no body read is in flight on the client leg
  // (one is cancelled first).
  void h2_end(ExchangeResult::End how, UpstreamError error = {});
  void h2_touch();
  void on_h2_timer(std::uint64_t generation);
  void on_h2_deadline();  // the host's deadline, on the upstream's side
  void h2_release();

  enum class Mode { kIdle, kHttp1, kHttp2 };
  // How far the exchange has got with the client, whichever the upstream's
  // protocol (the HTTP/2 relays' own states: H2Request, H2Response).
  enum class Progress {
    kNew,             // the request head is not serialized yet
    kHeadReady,       // req_head_ holds it (a retry on another connection reuses it)
    kContinueOwed,    // ... and the client waits for the 100 Continue Sluice owes it
    kResponseStarted  // something of the response went to the client leg
  };
  // Serializes the request head once; the client may then be owed a 100 Continue.
  void prepare_request_head(std::string_view upstream_host);

  ExchangeHost& host_;
  ClientLeg& client_;
  WorkerExecutor executor_;
  UpstreamPools& pools_;
  std::weak_ptr<UpstreamExchange> self_;
  ExchangeRequest request_;
  ParserSlot res_parser_;
  std::span<char> relay_;

  const UpstreamConfig* upstream_cfg_ = nullptr;
  std::unique_ptr<UpstreamConnection> upstream_;
  bool upstream_busy_ = false;  // an operation on upstream_ is in flight
  // Dropped connections whose operation has not ended yet, by generation;
  // upstream_generation_ is that of upstream_'s operations.
  std::vector<Dropped> dropped_;
  std::uint64_t upstream_generation_ = 0;
  // After a 101: the client and upstream connections relayed both ways. Kept
  // until the host goes (its handlers may still be queued when it ends).
  std::unique_ptr<Tunnel> tunnel_;
  std::vector<std::size_t> tried_;
  std::size_t server_index_ = 0;
  std::unique_ptr<boost::asio::ip::tcp::resolver> resolver_;
  std::unique_ptr<boost::asio::steady_timer> resolve_timer_;
  std::unique_ptr<Timer> slot_timer_;  // waiting for an upstream connection
  std::uint64_t slot_generation_ = 0;
  Clock::time_point slot_deadline_{};  // set once per exchange
  bool waiting_for_slot_ = false;

  std::string req_head_;  // the serialized request head; its capacity is reused
  ChunkPrefix chunk_prefix_;
  PieceBuffers out_buffers_;  // one write in flight at a time
  std::string upstream_server_;
  unsigned upstream_status_ = 0;
  std::optional<std::string> usage_;
  bool upstream_timed_out_ = false;
  // Why the last connect (or TLS handshake) failed, for the reply when no
  // server is left to try.
  UpstreamError last_connect_error_ = UpstreamError::kConnectFailed;
  bool upstream_reused_ = false;  // upstream_ came from the pool
  bool retried_on_fresh_ = false;
  bool upstream_reusable_ = false;
  bool req_head_pending_ = false;  // the next write to upstream_ starts with the head
  std::size_t head_fields_ = 0;      // the response head's fields (trailers follow them)
  boost::beast::http::fields trailers_;
  Progress progress_ = Progress::kNew;
  ChunkExtensionLimit chunk_extension_limit_;
  Mode mode_ = Mode::kIdle;
  Clock::time_point deadline_at_ = Clock::time_point::max();  // the request's deadline

  // An HTTP/2 upstream's stream and its connection (shared with other exchanges).
  std::shared_ptr<H2Connection> h2_conn_;
  std::shared_ptr<H2Stream> h2_;
  std::optional<H2Fields> h2_head_;  // the request head in HTTP/2 terms
  std::string h2_out_;                // response DATA lent to the client leg
  std::size_t h2_out_owed_ = 0;       // of it, not yet given back to the flow-control window
  H2Request h2_request_ = H2Request::kDone;
  H2Response h2_response_ = H2Response::kDone;
  std::optional<std::pair<ExchangeResult::End, UpstreamError>> h2_pending_end_;
  std::unique_ptr<Timer> h2_timer_;  // response_timeout between upstream events
  Clock::time_point h2_deadline_{};
  std::uint64_t h2_generation_ = 0;  // of h2_: handlers of an earlier stream do nothing
  bool h2_timer_armed_ = false;
  bool h2_progress_posted_ = false;
  bool h2_opened_ = false;   // this exchange opened h2_conn_ (and counts it once ready)
  bool h2_last_sent_ = false;  // the piece being sent ends the response
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

}  // namespace sluice
