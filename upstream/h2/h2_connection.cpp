#include "upstream/h2/h2_connection.hpp"

#include <algorithm>
#include <cstring>

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "common/ascii.hpp"
#include "common/guarded.hpp"
#include "common/http_limits.hpp"
#include "upstream/h2/h2_nv.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

constexpr std::size_t kReadBytes = 16 * 1024;
constexpr std::size_t kMaxPendingOut = 64 * 1024;
// What the server may send on one stream, and on the connection, before
// Sluice gives window back. A stream's window comes back as its client takes
// the response, so a slow client holds at most one stream window in memory;
// the connection's comes back as DATA arrives, so that slow streams never
// stop the connection's other streams.
constexpr std::int32_t kStreamWindow = 256 * 1024;
constexpr std::int32_t kConnectionWindow = 16 * 1024 * 1024;
// The streams opened before the server's SETTINGS say how many it takes.
constexpr std::uint32_t kStreamsBeforeSettings = 100;


}  // namespace

struct H2UpstreamCallbacks {
  static H2Connection& of(void* user_data) { return *static_cast<H2Connection*>(user_data); }
  template <class Fn>
  static int guard(void* user_data, Fn fn) noexcept {
    try {
      return fn(of(user_data));
    } catch (const std::exception& e) {
      spdlog::error("upstream {}: HTTP/2 connection: internal error: {}", of(user_data).options_.upstream,
                    e.what());
    } catch (...) {
    }
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  static int header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                    std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                    std::uint8_t, void* user_data) {
    return guard(user_data, [&](H2Connection& c) {
      return c.on_header(frame->hd.stream_id, frame->headers.cat,
                         {reinterpret_cast<const char*>(name), namelen},
                         {reinterpret_cast<const char*>(value), valuelen});
    });
  }
  static int frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    return guard(user_data, [&](H2Connection& c) {
      return c.on_frame_recv(frame->hd.type, frame->hd.flags, frame->hd.stream_id);
    });
  }
  static int data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
                        std::size_t len, void* user_data) {
    return guard(user_data, [&](H2Connection& c) { return c.on_data_chunk(id, data, len); });
  }
  static int stream_close(nghttp2_session*, std::int32_t id, std::uint32_t code, void* user_data) {
    return guard(user_data, [&](H2Connection& c) { return c.on_stream_close(id, code); });
  }
  static ssize_t read_body(nghttp2_session*, std::int32_t id, std::uint8_t* buf,
                           std::size_t length, std::uint32_t* flags, nghttp2_data_source*,
                           void* user_data) {
    return guard(user_data,
                 [&](H2Connection& c) { return static_cast<int>(c.read_body(id, buf, length, flags)); });
  }
};

template <class Fn>
auto H2Connection::handler(Fn fn) {
  return guarded(shared_from_this(), std::move(fn));
}

H2Connection::H2Connection(std::unique_ptr<UpstreamConnection> conn, Options options)
    : conn_(std::move(conn)),
      options_(std::move(options)),
      in_(kReadBytes),
      timer_(conn_->stream.get_executor()),
      ping_timer_(conn_->stream.get_executor()),
      write_timer_(conn_->stream.get_executor()) {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, H2UpstreamCallbacks::header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, H2UpstreamCallbacks::frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks,
                                                            H2UpstreamCallbacks::data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks,
                                                         H2UpstreamCallbacks::stream_close);
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  nghttp2_option_set_no_auto_window_update(option, 1);  // given back as clients take DATA
  nghttp2_session_client_new2(&session_, callbacks, this, option);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<std::uint32_t>(kStreamWindow)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(kMaxResponseHeadBytes)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

H2Connection::~H2Connection() {
  nghttp2_session_del(session_);
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

// ---- Streams ----------------------------------------------------------------------

bool H2Connection::has_room() const {
  if (!usable()) return false;
  std::uint32_t allowed = nghttp2_session_get_remote_settings(
      session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  if (state_ == State::kConnecting) allowed = std::min(allowed, kStreamsBeforeSettings);
  return streams_.size() < allowed;
}

std::shared_ptr<H2Stream> H2Connection::open_stream(const H2Fields& head, bool has_body,
                                                    std::function<void()> wake) {
  if (!usable()) return nullptr;
  std::vector<nghttp2_nv> nva;
  nva.reserve(head.size());
  for (const auto& [name, value] : head) nva.push_back(h2_nv(name, value));
  auto s = std::make_shared<H2Stream>();
  s->wake = std::move(wake);
  nghttp2_data_provider provider{};
  provider.read_callback = H2UpstreamCallbacks::read_body;
  const std::int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                                 has_body ? &provider : nullptr, nullptr);
  if (id < 0) {
    // Out of stream ids (or out of memory): no more streams on this one; it
    // goes once those it has are done.
    if (state_ == State::kReady) state_ = State::kGoingAway;
    update_idle();
    return nullptr;
  }
  s->id = id;
  streams_.emplace(id, s);
  update_idle();
  request_flush();
  return s;
}

void H2Connection::send_body(H2Stream& s, const char* data, std::size_t n, bool last,
                             const boost::beast::http::fields* trailers) {
  s.piece = data;
  s.piece_left = n;
  s.piece_last = last;
  s.piece_pending = true;
  s.request_trailers = last ? trailers : nullptr;
  if (s.closed) return;
  nghttp2_session_resume_data(session_, s.id);
  request_flush();
}

long H2Connection::read_body(std::int32_t id, std::uint8_t* buf, std::size_t length,
                             std::uint32_t* flags) {
  H2Stream* s = stream(id);
  if (!s || !s->piece_pending) return NGHTTP2_ERR_DEFERRED;
  const std::size_t n = std::min(length, s->piece_left);
  if (n > 0) std::memcpy(buf, s->piece, n);
  s->piece += n;
  s->piece_left -= n;
  s->body_started = s->body_started || n > 0;
  if (s->piece_left > 0) return static_cast<long>(n);
  s->piece_pending = false;
  if (s->piece_last) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (s->request_trailers) {
      std::vector<std::string> names;
      std::vector<std::string> values;
      for (const auto& f : *s->request_trailers) {
        std::string name(f.name_string());
        ascii::to_lower_in_place(name);
        if (is_connection_specific(name) || name == "te" || name == "host") continue;
        names.push_back(std::move(name));
        values.emplace_back(f.value());
      }
      std::vector<nghttp2_nv> nva;
      for (std::size_t i = 0; i < names.size(); ++i) nva.push_back(h2_nv(names[i], values[i]));
      if (!nva.empty() &&
          nghttp2_submit_trailer(session_, id, nva.data(), nva.size()) == 0) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
    }
  }
  wake(*s);
  return static_cast<long>(n);
}

void H2Connection::consume(H2Stream& s, std::size_t n) {
  if (n == 0 || state_ == State::kClosed || s.closed) return;
  nghttp2_session_consume_stream(session_, s.id, n);
  request_flush();
}

void H2Connection::release(H2Stream& s) {
  s.wake = nullptr;
  s.piece_pending = false;
  s.piece = nullptr;
  if (state_ == State::kClosed || s.id == 0) return;
  s.data.clear();  // the connection's window had it back on arrival
  if (!s.closed) nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id, NGHTTP2_CANCEL);
  request_flush();
}

H2Stream* H2Connection::stream(std::int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

void H2Connection::wake(H2Stream& s) {
  if (s.wake) s.wake();
}

// ---- nghttp2's callbacks ----------------------------------------------------------

int H2Connection::on_header(std::int32_t id, std::uint8_t category, std::string_view name,
                            std::string_view value) {
  (void)category;
  H2Stream* s = stream(id);
  if (!s) return 0;
  s->header_bytes += name.size() + value.size() + 32;
  if (s->header_bytes > kMaxResponseHeadBytes) {
    // Too large a head: the stream is reset (the exchange answers 502).
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  if (!s->head_done) {
    if (name == ":status") {
      s->status = h2_status(value).value_or(0);
    } else if (!name.empty() && name[0] != ':' && !is_connection_specific(name)) {
      s->head.insert(name, value);
    }
    return 0;
  }
  if (!name.empty() && name[0] != ':' && !is_connection_specific(name)) {
    s->trailers.insert(name, value);
    s->has_trailers = true;
  }
  return 0;
}

int H2Connection::on_frame_recv(std::uint8_t type, std::uint8_t flags, std::int32_t id) {
  if (type == NGHTTP2_GOAWAY) {
    // No new streams; those the server will not process close as refused.
    if (state_ == State::kReady) state_ = State::kGoingAway;
    update_idle();
    return 0;
  }
  H2Stream* s = stream(id);
  if (!s) return 0;
  const bool end_stream = (flags & NGHTTP2_FLAG_END_STREAM) != 0;
  if (type == NGHTTP2_HEADERS && !s->head_done) {
    if (s->status / 100 == 1 && !end_stream) {
      // An interim response (100, 103): dropped.
      s->status = 0;
      s->head.clear();
      s->header_bytes = 0;
      return 0;
    }
    if (s->status == 0 || s->status / 100 == 1) {
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_PROTOCOL_ERROR);
      return 0;
    }
    s->head_done = true;
  }
  if ((type == NGHTTP2_HEADERS || type == NGHTTP2_DATA) && end_stream) s->end_stream = true;
  if (type == NGHTTP2_HEADERS || end_stream) wake(*s);
  return 0;
}

int H2Connection::on_data_chunk(std::int32_t id, const std::uint8_t* data, std::size_t n) {
  // The connection's window is given back at once (see kConnectionWindow);
  // the stream's when its client has taken the bytes (consume()).
  nghttp2_session_consume_connection(session_, n);
  H2Stream* s = stream(id);
  if (!s || !s->wake) return 0;  // nobody takes it
  s->data.append(reinterpret_cast<const char*>(data), n);
  wake(*s);
  return 0;
}

int H2Connection::on_stream_close(std::int32_t id, std::uint32_t error_code) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return 0;
  auto s = std::move(it->second);
  streams_.erase(it);
  s->closed = true;
  s->error_code = error_code;
  wake(*s);
  update_idle();
  return 0;
}

// ---- Reading and writing ----------------------------------------------------------

void H2Connection::read() {
  if (reading_ || state_ == State::kClosed || state_ == State::kConnecting) return;
  reading_ = true;
  conn_->stream.async_read_some(asio::buffer(in_),
                                handler([](H2Connection& self, error_code ec, std::size_t n) {
                                  self.on_read(ec, n);
                                }));
}

void H2Connection::on_read(error_code ec, std::size_t n) {
  reading_ = false;
  if (state_ == State::kClosed) return;
  if (ec) {
    tls_alert_ = ByteStream::tls_alert(ec);
    return broke(ByteStream::ended(ec) ? "closed by the server" : ec.message());
  }
  ssize_t rv = 0;
  {
    receiving_ = true;
    rv = nghttp2_session_mem_recv(session_, in_.data(), n);
    receiving_ = false;
  }
  if (rv < 0) return broke(nghttp2_strerror(static_cast<int>(rv)));
  if (ping_pending_) {
    // The server answers (whatever it sent).
    ping_pending_ = false;
    ping_timer_.cancel();
  }
  flush();
  read();
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
  asio::post(conn_->stream.get_executor(), handler([](H2Connection& self) {
               self.flush_posted_ = false;
               self.flush();
             }));
}

void H2Connection::flush() {
  if (writing_ || receiving_ || state_ == State::kClosed || state_ == State::kConnecting) return;
  while (out_.size() < kMaxPendingOut) {
    const std::uint8_t* data = nullptr;
    const auto n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) return broke(nghttp2_strerror(static_cast<int>(n)));
    if (n == 0) break;
    out_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
  if (out_.empty()) {
    if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
      close();  // GOAWAY both ways and no stream left
    }
    return;
  }
  writing_ = true;
  // A server that takes no byte for write_timeout is not waited for forever.
  const auto generation = ++write_generation_;
  write_timer_.expires_after(options_.write_timeout);
  write_timer_.async_wait(handler([generation](H2Connection& self, error_code ec) {
    if (ec || generation != self.write_generation_ || !self.writing_) return;
    self.broke("writes stalled: the server takes no data");
  }));
  asio::async_write(conn_->stream, asio::buffer(out_),
                    handler([](H2Connection& self, error_code ec, std::size_t) {
                      self.writing_ = false;
                      ++self.write_generation_;
                      self.write_timer_.cancel();
                      self.out_.clear();
                      if (self.out_.capacity() > 2 * kMaxPendingOut) self.out_.shrink_to_fit();
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
  ping_timer_.cancel();
  write_timer_.cancel();
  if (resolver_) resolver_->cancel();
  error_code ignored;
  conn_->stream.socket().close(ignored);
  release_slot();
  auto streams = std::move(streams_);
  streams_.clear();
  for (auto& [id, s] : streams) {
    s->closed = true;
    if (failure) {
      s->connect_failure = *failure;
    } else {
      s->connection_broke = true;
      s->tls_alert = tls_alert_;
    }
    wake(*s);
  }
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
    return;
  }
  const auto generation = ++idle_generation_;
  const auto close_idle = [](H2Connection& self) {
    self.state_ = State::kGoingAway;
    nghttp2_session_terminate_session(self.session_, NGHTTP2_NO_ERROR);
    self.flush();
  };
  if (options_.idle_timeout.count() == 0) {
    asio::post(conn_->stream.get_executor(), handler([generation, close_idle](H2Connection& self) {
                 if (generation == self.idle_generation_ && self.state_ == State::kReady) {
                   close_idle(self);
                 }
               }));
    return;
  }
  timer_.expires_after(options_.idle_timeout);
  timer_.async_wait(handler([generation, close_idle](H2Connection& self, error_code ec) {
    if (ec || generation != self.idle_generation_ || self.state_ != State::kReady) return;
    close_idle(self);
  }));
}

// A closed connection no longer counts against max_connections, even while
// its cancelled operations are still to complete: a request waiting for a
// connection to the server may go now.
void H2Connection::release_slot() {
  if (conn_->slots) {
    --conn_->slots->open;
    conn_->slots = nullptr;
  }
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
