// An upgraded connection (a WebSocket handshake the upstream answered with
// 101): from then on the client connection and the upstream connection are
// relayed to each other byte for byte, each way through a buffer of its own,
// one read and one write at a time, so a reader that does not keep up slows
// the writer and memory stays bounded (at most two buffers of
// kMaxPieceBytes per tunnel).
//
// How it ends: the upstream's end of stream ends the tunnel once what it sent
// has reached the client (the client connection may then close gracefully);
// the client's end of stream half-closes the upstream connection and the
// upstream's answer still flows until it closes too; an error on either side,
// no byte either way for the idle timeout, or a write that has not completed
// within the send timeout (a peer that stopped reading), ends it at once. The
// tunnel then closes the upstream connection and tells its host once, after
// every operation of its own has completed (so the host may use the client
// stream).
//
// It lives inside the object that owns the client connection; its handlers
// hold that owner alive through the aliasing shared_ptr given to start().
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "upstream/byte_stream.hpp"
#include "upstream/upstream_pool.hpp"

namespace sluice {

enum class TunnelDirection { kClientToUpstream, kUpstreamToClient };

// What a tunnel tells the client connection that owns it.
class TunnelHost {
 public:
  virtual ~TunnelHost() = default;
  // `n` bytes reached the other side.
  virtual void tunnel_relayed(TunnelDirection direction, std::size_t n) = 0;
  // The tunnel is over and the upstream connection closed. `graceful`: the
  // upstream ended it and everything reached the client, which may be closed
  // gracefully; otherwise (error, idle, closed by the host) it is cut.
  virtual void tunnel_ended(bool graceful) = 0;
  virtual void on_internal_error(std::string_view what) noexcept = 0;
};

class Tunnel {
 public:
  // The largest piece read at once; a direction starts at kFirstPieceBytes
  // and grows to this when a read fills its buffer.
  static constexpr std::size_t kMaxPieceBytes = 64 * 1024;
  static constexpr std::size_t kFirstPieceBytes = 16 * 1024;

  // `client_buffered`: bytes the client sent after its handshake (consumed
  // as they are relayed); it must outlive the tunnel.
  Tunnel(TunnelHost& host, ByteStream& client, boost::beast::flat_buffer& client_buffered,
         std::unique_ptr<UpstreamConnection> upstream, std::chrono::milliseconds idle_timeout,
         std::chrono::milliseconds send_timeout);
  Tunnel(const Tunnel&) = delete;
  Tunnel& operator=(const Tunnel&) = delete;

  // Sends `head` (the 101 for the client) with whatever the upstream sent
  // after its own head, and starts relaying both ways. `self` is this
  // object, sharing ownership with its owner.
  void start(std::string head, const std::shared_ptr<Tunnel>& self);

  // Ends the tunnel now (the host is closing): the upstream connection is
  // closed and the client socket's operations cancelled; tunnel_ended follows.
  void stop();

  bool ended() const { return ended_; }

  void on_internal_error(std::string_view what) noexcept { host_.on_internal_error(what); }

 private:
  using Clock = std::chrono::steady_clock;
  using Timer =
      boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, WorkerExecutor>;

  // One direction's buffer and state.
  struct Leg {
    std::unique_ptr<char[]> buffer;
    std::size_t capacity = 0;
    bool busy = false;    // a read or a write of this leg is in flight
    bool filled = false;  // the last read filled the buffer
    Clock::time_point writing_since{};  // a write is in flight since then
  };

  template <class Fn>
  auto handler(Fn fn);

  void read_client();
  void on_client_read(boost::beast::error_code ec, std::size_t n);
  void on_upstream_written(boost::beast::error_code ec, std::size_t n, bool buffered);
  void read_upstream();
  void on_upstream_read(boost::beast::error_code ec, std::size_t n);
  void on_client_written(boost::beast::error_code ec, std::size_t n, std::size_t head_bytes);
  void arm_idle_timer();
  // When the timer must next look: the idle deadline, or a write's send deadline.
  Clock::time_point next_check() const;
  void on_idle_timer(boost::beast::error_code ec);
  static void grow(Leg& leg);
  // Ends the tunnel (graceful: see TunnelHost::tunnel_ended); it is over once
  // no operation of its own is left in flight.
  void finish(bool graceful);
  void maybe_report();

  TunnelHost& host_;
  ByteStream& client_;
  boost::beast::flat_buffer& client_buffered_;
  std::unique_ptr<UpstreamConnection> upstream_;
  std::chrono::milliseconds idle_timeout_;
  std::chrono::milliseconds send_timeout_;
  std::weak_ptr<Tunnel> self_;
  Timer idle_timer_;
  Clock::time_point last_activity_;
  std::string head_;
  Leg to_upstream_;
  Leg to_client_;
  bool idle_timer_busy_ = false;
  bool finishing_ = false;
  bool graceful_ = false;
  bool ended_ = false;
};

}  // namespace sluice
