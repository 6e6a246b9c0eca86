// H2Connection's I/O: the connect (resolve, TCP, TLS with ALPN h2), the
// streams handed over by their exchanges, one read and one write at a time
// through the nghttp2 session (its callbacks: h2_connection_frames.cpp), the
// PING probe, and the ends (broken, retired, idle).
#include "upstream/h2/h2_connection.hpp"

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "common/guarded.hpp"
#include "common/soon.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

}  // namespace

template <class Fn>
auto H2Connection::handler(Fn fn) {
  return guarded(shared_from_this(), std::move(fn));
}

// ---- Connecting -----------------------------------------------------------------

void H2Connection::connect() {
  timer_.expires_after(options_.connect_timeout);
  timer_.async_wait(handler([](H2Connection& self, error_code ec) {
    if (ec || self.state_ != State::kConnecting) return;
    if (self.resolver_) self.resolver_->cancel();
    self.connect_failed("connect", "timed out",
                        {UpstreamOutcome::kTimeout, UpstreamError::kConnectTimedOut, {}});
  }));
  const HostPort& hp = conn_->address;
  error_code ec;
  const auto address = asio::ip::make_address(hp.host, ec);
  if (!ec) return connect_to({tcp::endpoint{address, hp.port}});
  resolver_ = std::make_unique<tcp::resolver>(conn_->stream.get_executor());
  resolver_->async_resolve(
      hp.host, std::to_string(hp.port),
      handler([](H2Connection& self, error_code ec, const tcp::resolver::results_type& results) {
        if (self.state_ != State::kConnecting) return;
        if (ec) return self.on_connect(ec);
        std::vector<tcp::endpoint> endpoints;
        for (const auto& r : results) endpoints.push_back(r.endpoint());
        self.connect_to(std::move(endpoints));
      }));
}

void H2Connection::connect_to(std::vector<tcp::endpoint> endpoints) {
  conn_->stream.tcp().async_connect(
      endpoints, handler([](H2Connection& self, error_code ec, const tcp::endpoint&) {
        self.on_connect(ec);
      }));
}

void H2Connection::on_connect(error_code ec) {
  if (state_ != State::kConnecting) return;  // timed out, or closed
  if (ec) {
    return connect_failed("connect", ec.message(),
                          {UpstreamOutcome::kConnectError, UpstreamError::kConnectFailed, {}});
  }
  error_code ignored;
  conn_->stream.socket().set_option(tcp::no_delay(true), ignored);
  if (!options_.tls) return became_ready();
  const UpstreamTls& tls = *options_.tls;
  TlsSocket& session = conn_->stream.use_tls(tls.context(), options_.tls, TlsSocket::Role::kClient);
  conn_->tls = &tls;
  if (!tls.prepare(session.native_handle(), conn_->address.host, options_.resume.get(), true)) {
    return connect_failed("TLS handshake", "the server's name cannot be checked",
                          {UpstreamOutcome::kTlsError, UpstreamError::kTlsFailed, {}});
  }
  conn_->stream.tls().async_handshake(
      handler([](H2Connection& self, error_code ec) { self.on_handshake(ec); }));
}

void H2Connection::on_handshake(error_code ec) {
  if (state_ != State::kConnecting) return;
  SSL* ssl = conn_->stream.tls_session().native_handle();
  if (ec) {
    return connect_failed("TLS handshake", UpstreamTls::failure_reason(ssl, ec.message()),
                          {UpstreamOutcome::kTlsError, UpstreamError::kTlsFailed, {}});
  }
  if (!UpstreamTls::negotiated_h2(ssl)) {
    return connect_failed("TLS handshake", "the server did not choose h2 by ALPN",
                          {UpstreamOutcome::kTlsError, UpstreamError::kTlsFailed, {}});
  }
  became_ready();
}

void H2Connection::became_ready() {
  state_ = retired_ ? State::kGoingAway : State::kReady;
  timer_.cancel();
  flush();
  read();
  update_idle();
  // The streams opened meanwhile may send their bodies now.
  for (auto& [id, s] : streams_) wake(*s);
}

// The connection never became ready: its streams learn why, each to try
// another server or answer its client.
void H2Connection::connect_failed(std::string_view what, const std::string& reason,
                                  H2ConnectFailure failure) {
  if (options_.log_failures) {
    spdlog::warn("upstream {} server {}: {} failed: {}", options_.upstream, conn_->server, what,
                 reason);
  }
  failure.reason = std::string(what) + " failed: " + reason;
  shut(&failure);
}

// ---- Reading and writing ----------------------------------------------------------

void H2Connection::read() {
  if (reading_ || state_ == State::kClosed || state_ == State::kConnecting) return;
  reading_ = true;
  const auto into = pump_.read_buffer();
  conn_->stream.async_read_some(
      asio::buffer(into.data(), into.size()),
      handler([](H2Connection& self, error_code ec, std::size_t n) { self.on_read(ec, n); }));
}

void H2Connection::on_read(error_code ec, std::size_t n) {
  SoonBatch batch(conn_->stream.get_executor());  // what the frames of this read start
  reading_ = false;
  if (state_ == State::kClosed) return;
  if (ec) {
    tls_alert_ = ByteStream::tls_alert(ec);
    return broke(ByteStream::ended(ec) ? "closed by the server" : ec.message());
  }
  const ssize_t rv = pump_.receive(session_, pump_.read_buffer().first(n));
  if (rv < 0) return broke(nghttp2_strerror(static_cast<int>(rv)));
  if (ping_pending_) {
    // The server answers (whatever it sent).
    ping_pending_ = false;
    ping_timer_.cancel();
  }
  flush();
  read();
  batch.run();  // it goes now (soon.hpp)
}

void H2Connection::probe() {
  if (!connected() || ping_pending_) return;
  ping_pending_ = true;
  nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, nullptr);
  request_flush();
  ping_timer_.expires_after(options_.ping_timeout);
  ping_timer_.async_wait(handler([](H2Connection& self, error_code ec) {
    if (ec || !self.ping_pending_) return;
    if (self.options_.log_failures) {
      spdlog::warn("upstream {} server {}: no answer to a PING in time, closing the connection",
                   self.options_.upstream, self.conn_->server);
    }
    self.close();
  }));
}

void H2Connection::request_flush() {
  if (flush_posted_ || state_ == State::kClosed || state_ == State::kConnecting) return;
  flush_posted_ = true;
  post_last(conn_->stream.get_executor(), handler([](H2Connection& self) {
               self.flush_posted_ = false;
               self.flush();
             }));
}

void H2Connection::flush() {
  if (!pump_.can_send() || state_ == State::kClosed || state_ == State::kConnecting) return;
  std::size_t written = 0;
  for (;;) {
    if (const int rv = pump_.gather(session_); rv < 0) return broke(nghttp2_strerror(rv));
    const std::string& out = pump_.pending();
    if (out.empty()) {
      if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
        close();  // GOAWAY both ways and no stream left
      }
      return;
    }
    // What the socket takes at once is written now (no completion to wait
    // for); the rest goes asynchronously.
    error_code ec;
    written = conn_->stream.write_now(asio::buffer(out), ec);
    if (!ByteStream::would_block(ec)) {
      pump_.write_done();
      return broke(ec.message());
    }
    if (written < out.size()) break;
    pump_.write_done();
  }
  // A server that takes no byte for write_timeout is not waited for forever.
  const auto generation = pump_.start_write();
  write_timer_.expires_after(options_.write_timeout);
  write_timer_.async_wait(handler([generation](H2Connection& self, error_code ec) {
    if (ec || !self.pump_.stalled(generation)) return;
    self.broke("writes stalled: the server takes no data");
  }));
  const std::string& out = pump_.pending();
  asio::async_write(conn_->stream, asio::buffer(out.data() + written, out.size() - written),
                    handler([](H2Connection& self, error_code ec, std::size_t) {
                      self.pump_.write_done();
                      self.write_timer_.cancel();
                      if (self.state_ == State::kClosed) return;
                      if (ec) {
                        self.tls_alert_ = ByteStream::tls_alert(ec);
                        return self.broke(ec.message());
                      }
                      self.flush();
                    }));
}

// ---- Ending -----------------------------------------------------------------------

void H2Connection::on_internal_error(std::string_view what) noexcept {
  try {
    spdlog::error("upstream {}: internal error, closing an HTTP/2 connection: {}",
                  options_.upstream, what);
  } catch (...) {
  }
  close();
}

void H2Connection::broke(std::string_view what) {
  if (state_ == State::kClosed) return;
  if (!streams_.empty() && options_.log_failures) {
    spdlog::warn("upstream {} server {}: HTTP/2 connection failed: {}", options_.upstream,
                 conn_->server, what);
  }
  close();
}

void H2Connection::close() {
  shut(nullptr);
}

void H2Connection::retire() {
  retired_ = true;
  if (streams_.empty()) return close();
  if (state_ == State::kReady) state_ = State::kGoingAway;
  update_idle();
}

// Closed: every open stream ends, told why (`failure`: the connection never
// became ready; null: it broke or was closed).
void H2Connection::shut(const H2ConnectFailure* failure) {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  timer_.cancel();
  idle_wait_.clear_deadline();
  ping_timer_.cancel();
  write_timer_.cancel();
  if (resolver_) resolver_->cancel();
  error_code ignored;
  conn_->stream.socket().close(ignored);
  release_slot();
  auto streams = streams_.take_all();
  if (failure && !queued_.empty()) {
    queued_.front().stream->reports_failure = true;
  } else if (!streams.empty()) {
    streams.begin()->second->reports_failure = true;
  }
  end_queued(failure);
  for (auto& [id, s] : streams) {
    if (failure) {
      s->state = H2Stream::State::kConnectFailed;
      s->connect_failure = *failure;
    } else {
      s->state = tls_alert_ ? H2Stream::State::kTlsAlert : H2Stream::State::kBroken;
    }
    wake(*s);
  }
  deadlines_.stop_if_idle();  // legs still waiting keep it until they let go
}

// No stream left: the connection closes after idle_timeout (at once when 0),
// with a GOAWAY first.
void H2Connection::update_idle() {
  if (streams_.empty() && state_ == State::kGoingAway) {
    // Going away with no stream left: GOAWAY (if not sent yet), then the close.
    nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
    request_flush();
    return;
  }
  if (!streams_.empty() || state_ != State::kReady) {
    ++idle_generation_;
    idle_wait_.clear_deadline();
    return;
  }
  const auto generation = ++idle_generation_;
  if (options_.idle_timeout.count() == 0) {
    post_soon(conn_->stream.get_executor(), handler([generation](H2Connection& self) {
                 if (generation == self.idle_generation_ && self.state_ == State::kReady) {
                   self.close_idle();
                 }
               }));
    return;
  }
  deadlines_.expires_after(idle_wait_, options_.idle_timeout, *this);
}

void H2Connection::idle_timed_out() {
  if (streams_.empty() && state_ == State::kReady) close_idle();
}

void H2Connection::close_idle() {
  state_ = State::kGoingAway;
  nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
  flush();
}

// A closed connection no longer counts against max_connections, even while
// its cancelled operations are still to complete: a request waiting for a
// connection to the server may go now.
void H2Connection::release_slot() {
  if (conn_->slots) {
    --conn_->slots->open;
    conn_->slots = nullptr;
  }
  conn_->descriptor.release();
  if (auto on_release = std::move(conn_->on_release)) {
    conn_->on_release = nullptr;
    on_release();
  }
}

TlsSessionRef H2Connection::take_tls_session() {
  if (tls_session_taken_ || !options_.tls || state_ == State::kConnecting ||
      state_ == State::kClosed) {
    return nullptr;
  }
  tls_session_taken_ = true;
  return resumable_session(conn_->stream.tls_session().native_handle());
}

}  // namespace sluice
