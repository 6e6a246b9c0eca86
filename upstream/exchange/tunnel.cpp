#include "upstream/exchange/tunnel.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include <boost/asio/write.hpp>

#include "common/guarded.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

}  // namespace

Tunnel::Tunnel(TunnelHost& host, ByteStream& client, beast::flat_buffer& client_buffered,
               std::unique_ptr<UpstreamConnection> upstream, std::chrono::milliseconds idle_timeout,
               std::chrono::milliseconds send_timeout)
    : host_(host),
      client_(client),
      client_buffered_(client_buffered),
      upstream_(std::move(upstream)),
      idle_timeout_(idle_timeout),
      send_timeout_(send_timeout),
      idle_timer_(client.get_executor()) {}

template <class Fn>
auto Tunnel::handler(Fn fn) {
  return guarded(self_.lock(), std::move(fn));
}

void Tunnel::start(std::string head, const std::shared_ptr<Tunnel>& self) {
  self_ = self;
  head_ = std::move(head);
  last_activity_ = Clock::now();
  arm_idle_timer();

  // To the client: the 101, and what the upstream sent after its own head.
  to_client_.busy = true;
  to_client_.writing_since = last_activity_;
  const std::array<asio::const_buffer, 2> out{asio::buffer(head_), upstream_->buffer.data()};
  asio::async_write(client_, out,
                    handler([head_bytes = head_.size()](Tunnel& self, beast::error_code ec,
                                                        std::size_t n) {
                      self.on_client_written(ec, n, head_bytes);
                    }));

  // To the upstream: what the client sent after its handshake, if anything.
  if (client_buffered_.size() == 0) return read_client();
  to_upstream_.busy = true;
  to_upstream_.writing_since = last_activity_;
  asio::async_write(upstream_->stream, client_buffered_.data(),
                    handler([](Tunnel& self, beast::error_code ec, std::size_t n) {
                      self.on_upstream_written(ec, n, true);
                    }));
}

void Tunnel::stop() { finish(false); }

// ---- Client to upstream -----------------------------------------------------

void Tunnel::read_client() {
  grow(to_upstream_);
  to_upstream_.busy = true;
  client_.async_read_some(asio::buffer(to_upstream_.buffer.get(), to_upstream_.capacity),
                          handler([](Tunnel& self, beast::error_code ec, std::size_t n) {
                            self.on_client_read(ec, n);
                          }));
}

void Tunnel::on_client_read(beast::error_code ec, std::size_t n) {
  to_upstream_.busy = false;
  if (finishing_) return maybe_report();
  if (n > 0) {
    last_activity_ = Clock::now();
    to_upstream_.filled = n == to_upstream_.capacity;
    to_upstream_.busy = true;
    to_upstream_.writing_since = last_activity_;
    asio::async_write(upstream_->stream, asio::buffer(to_upstream_.buffer.get(), n),
                      handler([](Tunnel& self, beast::error_code ec, std::size_t n) {
                        self.on_upstream_written(ec, n, false);
                      }));
    return;
  }
  if (!ByteStream::ended(ec)) return finish(false);
  // The client is done sending: so is the upstream connection's writing
  // side, and the upstream's answer still flows until it closes too.
  upstream_->stream.shutdown_send();
}

void Tunnel::on_upstream_written(beast::error_code ec, std::size_t n, bool buffered) {
  to_upstream_.busy = false;
  to_upstream_.writing_since = {};
  if (finishing_) return maybe_report();
  if (ec) return finish(false);
  if (buffered) {
    client_buffered_.consume(n);
    client_buffered_.shrink_to_fit();  // the tunnel reads into its own buffers
  }
  last_activity_ = Clock::now();
  host_.tunnel_relayed(TunnelDirection::kClientToUpstream, n);
  read_client();
}

// ---- Upstream to client -----------------------------------------------------

void Tunnel::read_upstream() {
  grow(to_client_);
  to_client_.busy = true;
  upstream_->stream.async_read_some(asio::buffer(to_client_.buffer.get(), to_client_.capacity),
                                    handler([](Tunnel& self, beast::error_code ec, std::size_t n) {
                                      self.on_upstream_read(ec, n);
                                    }));
}

void Tunnel::on_upstream_read(beast::error_code ec, std::size_t n) {
  to_client_.busy = false;
  if (finishing_) return maybe_report();
  if (n > 0) {
    last_activity_ = Clock::now();
    to_client_.filled = n == to_client_.capacity;
    to_client_.busy = true;
    to_client_.writing_since = last_activity_;
    asio::async_write(client_, asio::buffer(to_client_.buffer.get(), n),
                      handler([](Tunnel& self, beast::error_code ec, std::size_t n) {
                        self.on_client_written(ec, n, 0);
                      }));
    return;
  }
  // The upstream closed: all it sent has reached the client already (a read
  // follows only a completed write), so the client may be closed gracefully.
  finish(ec == asio::error::eof);
}

void Tunnel::on_client_written(beast::error_code ec, std::size_t n, std::size_t head_bytes) {
  to_client_.busy = false;
  to_client_.writing_since = {};
  if (finishing_) return maybe_report();
  if (ec) return finish(false);
  const std::size_t relayed = n - head_bytes;
  if (head_bytes > 0) {
    // The heads are sent: their buffers go (the tunnel reads into its own).
    upstream_->buffer = {};
    head_ = {};
  }
  last_activity_ = Clock::now();
  if (relayed > 0) host_.tunnel_relayed(TunnelDirection::kUpstreamToClient, relayed);
  read_upstream();
}

// A direction gets its first buffer when it first reads, and the largest
// one once a read filled the one it has (a bulk transfer).
void Tunnel::grow(Leg& leg) {
  if (leg.buffer && !(leg.filled && leg.capacity < kMaxPieceBytes)) return;
  leg.capacity = leg.buffer ? kMaxPieceBytes : kFirstPieceBytes;
  leg.buffer = std::make_unique<char[]>(leg.capacity);
  leg.filled = false;
}

// ---- Idle timeout and the end -------------------------------------------------

Tunnel::Clock::time_point Tunnel::next_check() const {
  auto at = last_activity_ + idle_timeout_;
  for (const Leg* leg : {&to_upstream_, &to_client_}) {
    if (leg->writing_since != Clock::time_point{}) {
      at = std::min(at, leg->writing_since + send_timeout_);
    }
  }
  return at;
}

void Tunnel::arm_idle_timer() {
  idle_timer_busy_ = true;
  // A write that starts later is seen on the next look, at most a send
  // timeout away: a stalled peer is cut within one to two send timeouts.
  idle_timer_.expires_at(std::min(next_check(), Clock::now() + send_timeout_));
  idle_timer_.async_wait(
      handler([](Tunnel& self, beast::error_code ec) { self.on_idle_timer(ec); }));
}

void Tunnel::on_idle_timer(beast::error_code ec) {
  idle_timer_busy_ = false;
  if (finishing_) return maybe_report();
  if (ec) return;
  // Idle both ways, or a peer that has not taken a piece for send_timeout.
  if (Clock::now() >= next_check()) return finish(false);
  arm_idle_timer();  // there was activity meanwhile
}

void Tunnel::finish(bool graceful) {
  if (finishing_) return;
  finishing_ = true;
  graceful_ = graceful;
  idle_timer_.cancel();
  beast::error_code ignored;
  if (upstream_) upstream_->stream.socket().close(ignored);
  if (!graceful) {
    client_.socket().close(ignored);  // cut: whatever is pending on it fails
  } else if (to_upstream_.busy) {
    // The upstream ended after all it sent reached the client: only a read
    // of the client can be pending. Shutting down the receiving side ends it
    // (as end of stream, even a TLS read between two of its system calls),
    // and the host may then say close_notify on the stream.
    client_.socket().shutdown(tcp::socket::shutdown_receive, ignored);
  }
  maybe_report();
}

void Tunnel::maybe_report() {
  if (ended_ || to_upstream_.busy || to_client_.busy || idle_timer_busy_) return;
  ended_ = true;
  upstream_.reset();  // frees its slot of the upstream's max_connections
  to_upstream_ = {};
  to_client_ = {};
  host_.tunnel_ended(graceful_);
}

}  // namespace sluice
