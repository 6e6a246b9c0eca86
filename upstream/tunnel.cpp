#include "upstream/tunnel.hpp"

#include <array>
#include <utility>

#include <boost/asio/write.hpp>

#include "gateway/common/guarded.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

}  // namespace

Tunnel::Tunnel(TunnelHost& host, ClientStream& client, beast::flat_buffer& client_buffered,
               std::unique_ptr<UpstreamConnection> upstream, std::chrono::milliseconds idle_timeout)
    : host_(host),
      client_(client),
      client_buffered_(client_buffered),
      upstream_(std::move(upstream)),
      idle_timeout_(idle_timeout),
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
  const std::array<asio::const_buffer, 2> out{asio::buffer(head_), upstream_->buffer.data()};
  asio::async_write(client_, out,
                    handler([head_bytes = head_.size()](Tunnel& self, beast::error_code ec,
                                                        std::size_t n) {
                      self.on_client_written(ec, n, head_bytes);
                    }));

  // To the upstream: what the client sent after its handshake, if anything.
  if (client_buffered_.size() == 0) return read_client();
  to_upstream_.busy = true;
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
    asio::async_write(upstream_->stream, asio::buffer(to_upstream_.buffer.get(), n),
                      handler([](Tunnel& self, beast::error_code ec, std::size_t n) {
                        self.on_upstream_written(ec, n, false);
                      }));
    return;
  }
  if (!ClientStream::ended(ec)) return finish(false);
  // The client is done sending: so is the upstream connection's writing
  // side, and the upstream's answer still flows until it closes too.
  to_upstream_.ended = true;
  beast::error_code ignored;
  upstream_->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

void Tunnel::on_upstream_written(beast::error_code ec, std::size_t n, bool buffered) {
  to_upstream_.busy = false;
  if (finishing_) return maybe_report();
  if (ec) return finish(false);
  if (buffered) client_buffered_.consume(n);
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
    asio::async_write(client_, asio::buffer(to_client_.buffer.get(), n),
                      handler([](Tunnel& self, beast::error_code ec, std::size_t n) {
                        self.on_client_written(ec, n, 0);
                      }));
    return;
  }
  // The upstream closed: all it sent has reached the client already (a read
  // follows only a completed write), so the client may be closed gracefully.
  to_client_.ended = true;
  finish(ec == asio::error::eof);
}

void Tunnel::on_client_written(beast::error_code ec, std::size_t n, std::size_t head_bytes) {
  to_client_.busy = false;
  if (finishing_) return maybe_report();
  if (ec) return finish(false);
  const std::size_t relayed = n - head_bytes;
  if (head_bytes > 0) {
    upstream_->buffer.consume(relayed);
    head_.clear();
    head_.shrink_to_fit();
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

void Tunnel::arm_idle_timer() {
  idle_timer_busy_ = true;
  idle_timer_.expires_at(last_activity_ + idle_timeout_);
  idle_timer_.async_wait(
      handler([](Tunnel& self, beast::error_code ec) { self.on_idle_timer(ec); }));
}

void Tunnel::on_idle_timer(beast::error_code ec) {
  idle_timer_busy_ = false;
  if (finishing_) return maybe_report();
  if (ec) return;
  if (Clock::now() >= last_activity_ + idle_timeout_) return finish(false);
  arm_idle_timer();  // there was activity meanwhile
}

void Tunnel::finish(bool graceful) {
  if (finishing_) return;
  finishing_ = true;
  graceful_ = graceful;
  idle_timer_.cancel();
  beast::error_code ignored;
  if (upstream_) upstream_->stream.socket().close(ignored);
  // A read of the client still pending is cancelled (TLS included): the
  // host may then say close_notify on the stream.
  if (to_upstream_.busy || to_client_.busy) client_.socket().cancel(ignored);
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
