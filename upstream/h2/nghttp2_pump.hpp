// The bytes between one nghttp2 session and its socket, for both HTTP/2 sides
// of the gateway (a client connection, Http2Session, and an upstream
// connection, H2Connection): one read at a time into a fixed buffer, fed to
// nghttp2, and one write at a time of what nghttp2 has to send, gathered up
// to kMaxPendingOut. The pump does no I/O and owns no timer: its owner reads
// into read_buffer(), writes pending(), arms its write timer with the
// generation start_write() returns, and calls write_done() when the write
// ended. Nothing is sent from inside nghttp2's callbacks: while receive()
// runs, can_send() is false.
//
// Not thread-safe; used on its owner's executor only.
#pragma once

#include <sys/types.h>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

using nghttp2_session = struct nghttp2_session;

namespace sluice {

class Nghttp2Pump {
 public:
  // What one read takes from the socket.
  static constexpr std::size_t kReadBytes = 16 * 1024;
  // What is gathered for one write at most; past it the owner stops reading
  // (a peer that sends but does not read is not given more to queue).
  static constexpr std::size_t kMaxPendingOut = 64 * 1024;

  Nghttp2Pump() : in_(kReadBytes) {}

  std::span<std::uint8_t> read_buffer() { return in_; }
  // Feeds `bytes` (what a read put in read_buffer(), or bytes read before)
  // to `session`; what nghttp2_session_mem_recv returned (negative: nghttp2
  // gave up on the session).
  ssize_t receive(nghttp2_session* session, std::span<const std::uint8_t> bytes);
  bool receiving() const { return receiving_; }

  // No write in flight and not inside receive(): a write may start.
  bool can_send() const { return !writing_ && !receiving_; }
  bool writing() const { return writing_; }
  // What nghttp2 has to send, moved into pending() up to kMaxPendingOut;
  // 0, or the nghttp2 error that stopped it.
  int gather(nghttp2_session* session);
  const std::string& pending() const { return out_; }
  bool full() const { return out_.size() >= kMaxPendingOut; }

  // A write starts (of pending(), or of something else of the owner's);
  // its generation, for the owner's write timer.
  std::uint64_t start_write();
  // The write of `generation` is still the one in flight: its timer may fire.
  bool stalled(std::uint64_t generation) const {
    return writing_ && generation == write_generation_;
  }
  // The write ended (done or failed): pending() is emptied.
  void write_done();

 private:
  std::vector<std::uint8_t> in_;
  std::string out_;
  std::uint64_t write_generation_ = 0;
  bool receiving_ = false;
  bool writing_ = false;
};

}  // namespace sluice
