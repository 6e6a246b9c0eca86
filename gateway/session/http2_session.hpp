// One HTTP/2 client connection (h2 by ALPN on TLS, h2c with prior knowledge
// on plain listeners): libnghttp2 does the framing, HPACK and flow control,
// this session the I/O. Each stream is an Http2Stream, routed, limited and
// proxied like an HTTP/1.1 request.
//
// Reading and writing go through an Nghttp2Pump (the upstream connection
// has the same): one read at a time into a fixed buffer, fed to nghttp2,
// which calls back per frame; no read while what nghttp2 queued to send
// exceeds kMaxPendingOut (a client that sends but does not read is not given
// more answers to queue). Writing: one write at a time of what nghttp2
// produced, up to kMaxPendingOut at once. Request bodies are credited back to the
// client (WINDOW_UPDATE) only as the upstream takes them, so what one
// connection buffers is bounded by its flow-control windows.
//
// Protections: nghttp2 refuses floods of SETTINGS, PING and RST_STREAM
// (rapid reset), too many CONTINUATION frames, bad stream ids and window
// overflows, with GOAWAY; a header list larger than server.max_header_bytes
// gets a 431, one many times larger (an HPACK bomb) GOAWAY; streams beyond
// max_concurrent_streams are refused, and a client that keeps opening them
// gets GOAWAY. Each GOAWAY for an offence is counted by reason.
//
// The connection closes when idle (no stream) for idle_timeout, on GOAWAY
// once its streams are done, and after a drain's GOAWAY once its streams
// are done. Every handler runs on the worker's executor, through guarded().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/deadline_sweep.hpp"
#include "common/guarded.hpp"
#include "gateway/client_ip.hpp"
#include "gateway/worker.hpp"
#include "upstream/block_allocator.hpp"
#include "upstream/byte_stream.hpp"
#include "upstream/h2/h2_name_seeds.hpp"
#include "upstream/h2/nghttp2_pump.hpp"
#include "upstream/h2/stream_map.hpp"

struct nghttp2_session;

namespace sluice {

class Http2Stream;
struct ClientCertificate;

class Http2Session final : public ClientSession,
                           public std::enable_shared_from_this<Http2Session> {
 public:
  using Clock = std::chrono::steady_clock;

  // The connection's receive window, given back as DATA arrives: what a
  // client may have in flight at once. What the connection buffers is
  // bounded by its streams' windows (64 KiB each, given back as their bodies
  // are read).
  static constexpr std::int32_t kConnectionWindow = 1024 * 1024;
  // What any stream may read ahead, whatever the others hold.
  static constexpr std::size_t kReadAheadFloor = 64 * 1024;
  // What a stream that holds `own` bytes read ahead of its decision (a
  // route that reads members of the body) may read ahead still: the
  // connection's streams share server.http2.max_read_ahead_bytes, and a
  // stream reading alone reads up to its route's bound whatever that is.
  std::size_t read_ahead_room(std::size_t own) const {
    if (own == read_ahead_in_use_) return static_cast<std::size_t>(-1);  // alone
    const std::size_t shared =
        read_ahead_in_use_ < read_ahead_budget_ ? read_ahead_budget_ - read_ahead_in_use_ : 0;
    // Every stream may read its first bytes, where a model is usually named.
    const std::size_t floor = own < kReadAheadFloor ? kReadAheadFloor - own : 0;
    return std::max(shared, floor);
  }
  void read_ahead_add(std::size_t n) { read_ahead_in_use_ += n; }
  void read_ahead_remove(std::size_t n) { read_ahead_in_use_ -= n; }

  // `stream` is the connection as the HTTP/1.1 session that found HTTP/2 on
  // it (by ALPN or the preface) holds it; `stream_owner` keeps it alive.
  Http2Session(Worker& worker, ByteStream& stream, std::shared_ptr<void> stream_owner,
               IpAddress peer, std::string peer_text);
  ~Http2Session() override;
  Http2Session(const Http2Session&) = delete;
  Http2Session& operator=(const Http2Session&) = delete;

  // Starts with the bytes read already (those of the connection preface an
  // HTTP/1.1 read took for a request line).
  void start(std::string_view received);

  // ClientSession
  void on_drain() override;
  void force_close() override;
  std::optional<Clock::time_point> idle_since() const override { return idle_since_; }
  void on_internal_error(std::string_view what) noexcept;

  // For its streams.
  Worker& worker() { return worker_; }
  WorkerExecutor executor() { return stream_.get_executor(); }
  // The streams' deadlines, on one timer.
  DeadlineSweep<WorkerExecutor>& deadlines() { return deadlines_; }
  nghttp2_session* nghttp2() { return session_; }
  // Whether the next response head seeds the HPACK table (H2NameSeeds).
  bool seed_names() { return name_seeds_.next(); }
  const IpAddress& peer() const { return peer_; }
  const std::string& peer_text() const { return peer_text_; }
  // The connection's verified client certificate (its front door keeps it).
  const ClientCertificate* client_cert() const { return client_cert_; }
  void set_client_cert(const ClientCertificate* cert) { client_cert_ = cert; }
  bool over_tls() const { return stream_.is_tls(); }
  bool draining() const { return draining_; }
  bool closed() const { return closed_; }
  // Sends what nghttp2 has queued.
  void flush();
  // A stream submitted something: one flush after the handlers that run now,
  // so that what several streams submit goes in one write (and one TLS record).
  void request_flush();
  // A stream's header list grew past what it may: many times the limit is
  // an attack on the connection (GOAWAY).
  void header_list_abuse();
  // A stream's header block did not end within header_timeout (GOAWAY).
  void header_timeout();

 private:
  friend struct Http2Callbacks;

  template <class Fn>
  auto handler(Fn fn) {
    return guarded(shared_from_this(), std::move(fn));
  }

  void read();
  void on_read(boost::beast::error_code ec, std::size_t n);
  // Feeds received bytes to nghttp2; false when the connection must end.
  bool receive(std::span<const std::uint8_t> bytes);
  void on_written(boost::beast::error_code ec);
  void write_final_goaway();
  void arm_write_timer(std::uint64_t generation);
  // Ends the connection for an offence: GOAWAY with `code`, counted as `reason`.
  void goaway(std::uint32_t code, std::string_view reason);
  void count_goaway(std::uint32_t code);
  void update_idle();
  // No stream for idle_timeout: GOAWAY, then the close.
  void idle_timed_out();
  void graceful_close();
  void linger();
  void close();

  // nghttp2's callbacks, on this session.
  int on_begin_headers_frame(std::int32_t stream_id);
  int on_begin_headers(std::int32_t stream_id);
  int on_header(std::int32_t stream_id, std::string_view name, std::string_view value);
  int on_frame_recv(std::uint8_t type, std::uint8_t flags, std::int32_t stream_id);
  int on_data_chunk(std::int32_t stream_id, const std::uint8_t* data, std::size_t n);
  int on_stream_close(std::int32_t stream_id, std::uint32_t error_code);
  int on_frame_send(std::uint8_t type, std::uint8_t flags, std::int32_t stream_id,
                    std::uint32_t error_code);
  Http2Stream* stream(std::int32_t id);

  using Timer =
      boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, WorkerExecutor>;

  Worker& worker_;
  std::shared_ptr<void> stream_owner_;
  ByteStream& stream_;
  IpAddress peer_;
  std::string peer_text_;
  const ClientCertificate* client_cert_ = nullptr;
  nghttp2_session* session_ = nullptr;
  StreamMap<Http2Stream> streams_;
  Nghttp2Pump pump_;          // one read and one write at a time
  H2NameSeeds name_seeds_;
  std::string final_goaway_;  // written last, when nghttp2 gave up
  std::int32_t max_client_stream_ = 0;
  std::deque<std::int32_t> reset_streams_;
  Timer write_timer_;
  DeadlineSweep<WorkerExecutor> deadlines_;
  // idle_timeout from the last stream's end, on deadlines_ with the streams'.
  OwnerDeadline<Http2Session, &Http2Session::idle_timed_out> idle_wait_{*this};
  std::optional<Clock::time_point> idle_since_;
  std::uint64_t refused_streams_ = 0;
  std::size_t read_ahead_in_use_ = 0;  // bytes its streams hold, read ahead
  std::size_t read_ahead_budget_ = 0;  // server.http2.max_read_ahead_bytes at its start
  bool reading_ = false;
  bool flush_posted_ = false;
  bool draining_ = false;
  bool lingering_ = false;  // after the last frame, until the close
  bool closed_ = false;
  bool goaway_counted_ = false;
  bool internal_error_ = false;
};

}  // namespace sluice
