// One HTTP/2 connection to an upstream server (upstreams.NAME.protocol h2c or
// h2), carrying the streams of many exchanges of one worker at once. It
// connects itself (resolving a host name, within connect_timeout; TLS with
// ALPN h2 for protocol h2) while the first streams are already opened:
// their requests go once the connection is ready. Until the server's
// SETTINGS say how many streams it takes, one is sent and the others wait
// (h2_room.hpp); those it then has no room for are handed back (unplaced).
// libnghttp2 frames; the connection does the I/O, one read and one write at
// a time, through an Nghttp2Pump (the client side has the same).
//
// A stream (H2Stream) is shared by the connection and the exchange that
// opened it. The connection fills in the response as it arrives and calls
// the stream's `wake`, which the exchange sets to post itself a look at it;
// the exchange hands the request body over a piece at a time and gives DATA
// back to the stream's flow-control window as the client takes it, so that a
// slow client holds at most one stream window of a response. The
// connection's window is given back as DATA arrives: streams with slow
// clients never hold up the connection's other streams.
//
// Everything runs on the worker's executor. The connection is owned by the
// worker's pools and by its handlers in flight.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/deadline_sweep.hpp"
#include "common/inline_function.hpp"
#include "upstream/block_allocator.hpp"
#include "upstream/h2/h2_head.hpp"
#include "upstream/h2/h2_name_seeds.hpp"
#include "upstream/h2/h2_room.hpp"
#include "upstream/h2/nghttp2_pump.hpp"
#include "upstream/h2/stream_map.hpp"
#include "upstream/http_fields.hpp"
#include "upstream/upstream_config.hpp"
#include "upstream/upstream_error.hpp"
#include "upstream/upstream_pool.hpp"

using nghttp2_session = struct nghttp2_session;

namespace sluice {

// Why a connection never became ready, as each of its streams learns it.
struct H2ConnectFailure {
  UpstreamOutcome outcome = UpstreamOutcome::kConnectError;
  UpstreamError error = UpstreamError::kConnectFailed;
  std::string reason;  // "connect failed: Connection refused", "TLS handshake failed: ..."
};

// What a stream's exchange is told by: its captures (a weak owner and a
// generation) kept in place, not allocated per stream.
using StreamWake = InlineFunction<void(), 32>;

struct H2Stream {
  // Where the stream is, and how it ended: one state, moved on by the
  // connection only. Every state after kOpen is an end (closed()).
  enum class State {
    kQueued,         // waiting in the connection for the server's SETTINGS, not sent yet
    kOpen,           // sent, not closed
    kClosed,         // closed by the protocol: the response came whole, or a reset (error_code)
    kUnplaced,       // never sent: the connection had no room for it after all; open it elsewhere
    kBroken,         // the connection failed under it
    kTlsAlert,       // ... with a TLS alert (a refused client certificate)
    kConnectFailed,  // the connection never became ready (connect_failure says why)
  };
  // How far the response came.
  enum class Response {
    kAwaitingHead,  // no final head yet (interim 1xx heads are dropped)
    kHead,          // the head, and DATA as it comes
    kWhole,         // END_STREAM: nothing more comes (trailers, if any, are in)
  };

  bool closed() const { return state != State::kQueued && state != State::kOpen; }
  bool connection_broke() const { return state == State::kBroken || state == State::kTlsAlert; }
  bool head_done() const { return response != Response::kAwaitingHead; }
  bool whole() const { return response == Response::kWhole; }
  bool has_trailers() const { return trailers.begin() != trailers.end(); }

  State state = State::kQueued;
  std::uint32_t error_code = 0;      // kClosed: RST_STREAM's or GOAWAY's code (0: none)
  H2ConnectFailure connect_failure;  // kConnectFailed: why
  // The one stream of those a failed connection ends whose attempt counts
  // against the server (outlier detection): one failure, one report.
  bool reports_failure = false;

  // ---- The response, filled in by the connection ----
  Response response = Response::kAwaitingHead;
  unsigned status = 0;              // the final status
  HttpFields head;  // the response head's fields, pseudo-headers left out
  std::string data;                 // DATA received and not yet taken (at most the stream's window)
  HttpFields trailers;

  // ---- The request body going out (send_body) ----
  const char* piece = nullptr;
  std::size_t piece_left = 0;
  bool piece_pending = false;  // nghttp2 has not framed all of the piece yet
  bool piece_last = false;
  const HttpFields* request_trailers = nullptr;

  std::int32_t id = 0;
  std::size_t header_bytes = 0;
  StreamWake wake;  // something changed (never called from inside the exchange's call)
};

class H2Connection : public std::enable_shared_from_this<H2Connection> {
 public:
  struct Options {
    std::string upstream;                    // its name, for logs
    std::shared_ptr<const UpstreamTls> tls;  // null: h2c
    TlsSessionRef resume;                    // a session to resume (may be null)
    std::chrono::milliseconds connect_timeout{1000};
    // Closed after this long without a stream (0: as soon as none is left).
    std::chrono::milliseconds idle_timeout{60000};
    bool log_failures = true;  // a failed connect is logged (health checks report their own)
    // A PING unanswered this long, or a write not done in write_timeout,
    // closes the connection (its streams fail).
    std::chrono::milliseconds ping_timeout{1000};
    std::chrono::milliseconds write_timeout{30000};
  };

  // `conn`: a connection not yet connected, with its server's address.
  H2Connection(std::unique_ptr<UpstreamConnection> conn, Options options);
  ~H2Connection();
  H2Connection(const H2Connection&) = delete;
  H2Connection& operator=(const H2Connection&) = delete;

  // Resolves, connects and (h2) shakes hands; streams opened meanwhile wait.
  void connect();

  // A new stream for a request with the fields of `head` (write_h2_head),
  // with a body to come (send_body, once it is no longer queued) or not; null
  // when the connection takes no more streams (going away, closed, out of
  // stream ids).
  std::shared_ptr<H2Stream> open_stream(const H2HeaderBlock& head, bool has_body,
                                        StreamWake wake);
  // The next piece of `s`'s request body, lent until s.piece_pending goes
  // false; with the last, the request's trailers (may be null).
  void send_body(H2Stream& s, const char* data, std::size_t n, bool last,
                 const HttpFields* trailers);
  // `n` bytes of s.data were taken: the server may send as many more.
  void consume(H2Stream& s, std::size_t n);
  // The exchange is done with `s`: a stream still open is reset (CANCEL), and
  // what it holds is let go. `s` is not woken any more.
  void release(H2Stream& s);

  bool ready() const { return state_ == State::kReady; }
  bool is_closed() const { return state_ == State::kClosed; }
  // Connected (ready, or going away): its streams' requests may go.
  bool connected() const { return state_ == State::kReady || state_ == State::kGoingAway; }
  // Not going away or closed: new streams may be opened on it.
  bool usable() const { return state_ == State::kConnecting || state_ == State::kReady; }
  // Usable, and takes another stream (h2_takes_stream).
  bool has_room() const;
  // Called, from inside the connection's handlers, when it may take a stream
  // it did not before: a stream closed, the server's SETTINGS came, or it is
  // going away (so that another may be opened). `all`: any number of them.
  void set_on_room(std::function<void(bool all)> on_room) { on_room_ = std::move(on_room); }
  std::size_t streams() const { return streams_.size(); }
  const UpstreamTls* tls() const { return options_.tls.get(); }
  bool h2c() const { return !options_.tls; }
  // The TLS session of the connection (null: plain, or not resumable), once,
  // for the next connection to the server to resume.
  TlsSessionRef take_tls_session();
  // Closes the connection: every open stream ends (kBroken).
  void close();
  // Takes no new stream and closes, with a GOAWAY, once the streams it has
  // are done (at once without any): a reload changed its upstream's settings.
  void retire();
  // A stream on it got no answer in time: a PING asks whether the server
  // still answers at all; nothing from it within ping_timeout closes the
  // connection, so that no further stream is sent to a server that stopped.
  void probe();
  // An exception in one of its handlers: logged, and the connection closed.
  void on_internal_error(std::string_view what) noexcept;
  // Its streams' waits for the server (their legs'), on one timer.
  DeadlineSweep<WorkerExecutor>& deadlines() { return deadlines_; }

 private:
  friend struct H2UpstreamCallbacks;
  enum class State { kConnecting, kReady, kGoingAway, kClosed };
  template <class Fn>
  auto handler(Fn fn);

  void connect_to(std::vector<boost::asio::ip::tcp::endpoint> endpoints);
  void on_connect(boost::system::error_code ec);
  void on_handshake(boost::system::error_code ec);
  void became_ready();
  void connect_failed(std::string_view what, const std::string& reason, H2ConnectFailure failure);
  void read();
  void on_read(boost::system::error_code ec, std::size_t n);
  void flush();
  void request_flush();
  void broke(std::string_view what);
  void release_slot();
  void shut(const H2ConnectFailure* failure);
  bool tls_alert_ = false;  // it broke with a TLS alert
  void update_idle();
  // No stream for idle_timeout: GOAWAY, then the close.
  void idle_timed_out();
  void close_idle();
  void wake(H2Stream& s);
  H2Stream* stream(std::int32_t id);
  H2Room room() const;
  bool submit(const std::shared_ptr<H2Stream>& s, const H2HeaderBlock& head, bool has_body);
  void place_queued();
  void unqueue(H2Stream& s);
  void end_queued(const H2ConnectFailure* failure);
  void room_changed(bool all);

  // nghttp2's callbacks.
  int on_header(std::int32_t id, std::uint8_t category, std::string_view name,
                std::string_view value);
  int on_frame_recv(std::uint8_t type, std::uint8_t flags, std::int32_t id);
  int on_data_chunk(std::int32_t id, const std::uint8_t* data, std::size_t n);
  int on_stream_close(std::int32_t id, std::uint32_t error_code);
  long read_body(std::int32_t id, std::uint8_t* buf, std::size_t length, std::uint32_t* flags);

  std::unique_ptr<UpstreamConnection> conn_;
  Options options_;
  nghttp2_session* session_ = nullptr;
  State state_ = State::kConnecting;
  bool retired_ = false;  // retire(): going away as soon as it is ready
  StreamMap<H2Stream> streams_;
  // Streams opened before the server's SETTINGS, waiting for them.
  struct Queued {
    std::shared_ptr<H2Stream> stream;
    H2HeaderBlock head;
    bool has_body = false;
  };
  std::deque<Queued> queued_;
  bool settings_known_ = false;  // the server's SETTINGS arrived
  std::function<void(bool all)> on_room_;
  Nghttp2Pump pump_;  // one read and one write at a time
  H2NameSeeds name_seeds_;  // for request heads
  std::unique_ptr<boost::asio::ip::tcp::resolver> resolver_;
  boost::asio::steady_timer timer_;  // the connect deadline
  boost::asio::steady_timer ping_timer_;
  boost::asio::steady_timer write_timer_;
  DeadlineSweep<WorkerExecutor> deadlines_;
  // idle_timeout from the last stream's end, on deadlines_ with the legs'.
  OwnerDeadline<H2Connection, &H2Connection::idle_timed_out> idle_wait_{*this};
  bool ping_pending_ = false;
  bool reading_ = false;
  bool flush_posted_ = false;
  bool tls_session_taken_ = false;
  std::uint64_t idle_generation_ = 0;  // of an idle close posted (idle_timeout 0)
};

}  // namespace sluice
