#include "gateway/session.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "gateway/deadline.hpp"
#include "gateway/exchange_log.hpp"
#include "gateway/common/guarded.hpp"
#include "gateway/common/http_limits.hpp"
#include "gateway/local_reply.hpp"
#include "gateway/metrics.hpp"
#include "gateway/pipeline.hpp"
#include "gateway/request_admission.hpp"
#include "gateway/request_target.hpp"
#include "gateway/router.hpp"
#include "gateway/worker.hpp"
#include "upstream/framing.hpp"
#include "upstream/proxy_headers.hpp"
#include "upstream/upstream_error.hpp"
#include "upstream/upstream_pool.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kRelayBufferSize = Worker::kRelayBufferSize;
constexpr auto kLingerTimeout = std::chrono::seconds(2);
constexpr std::size_t kLingerMaxBytes = 1024 * 1024;
// What an idle keep-alive connection reads the next request's first bytes
// into (most heads fit): the read buffer it keeps while idle.
constexpr std::size_t kIdleReadBytes = 1024;
// A read asks the kernel for at most the free capacity of its buffer, so the
// buffers are sized before reading: a response head gets kUpstreamHeadBytes
// (one read for most heads and small bodies), a body being relayed gets room
// for a whole relay piece (reads of 512 bytes would cost a system call and a
// packet each). A pooled connection keeps only the head-sized buffer.
constexpr std::size_t kUpstreamHeadBytes = 4096;

// After a body timeout cancelled a read, the socket is closed this long later
// if the read did not end (see on_deadline).
constexpr auto kTimeoutBackstop = std::chrono::seconds(1);

// Bytes a closing connection still sends are read into this and dropped.
char* discard_buffer() {
  thread_local std::array<char, 4096> buffer;
  return buffer.data();
}

std::optional<std::uint64_t> to_std(const boost::optional<std::uint64_t>& v) {
  return v ? std::optional<std::uint64_t>{*v} : std::nullopt;
}

bool is_idempotent(http::verb v) {
  return v == http::verb::get || v == http::verb::head || v == http::verb::options ||
         v == http::verb::put || v == http::verb::delete_;
}

IpAddress to_ip(const asio::ip::address& a) {
  IpAddress ip;
  if (a.is_v4()) {
    auto b = a.to_v4().to_bytes();
    ip.bytes[10] = 0xff;
    ip.bytes[11] = 0xff;
    std::copy(b.begin(), b.end(), ip.bytes.begin() + 12);
  } else {
    auto b = a.to_v6().to_bytes();
    std::copy(b.begin(), b.end(), ip.bytes.begin());
  }
  return ip;
}

// Whose operation a session's deadline guards.
enum class Side { kClient, kUpstream };

class ProxySession final : public ClientSession,
                           public MiddlewareLater,
                           public std::enable_shared_from_this<ProxySession> {
 public:
  ProxySession(Worker& worker, WorkerSocket socket)
      : worker_(worker),
        stream_(std::move(socket)),
        head_timer_(stream_.get_executor()),
        deadline_(stream_.get_executor()) {
    beast::error_code ec;
    auto endpoint = stream_.socket().remote_endpoint(ec);
    peer_ = ec ? IpAddress{} : to_ip(endpoint.address());
    peer_text_ = peer_.to_string();
    stream_.socket().set_option(tcp::no_delay(true), ec);
    worker_.add_session(this);
  }

  ~ProxySession() override {
    set_idle(false);
    worker_.return_relay_buffer(std::move(relay_buffer_));
    worker_.remove_session(this);
  }

  void start() { do_read_head(); }

  void on_drain() override {
    draining_ = true;
    // Only a connection with no byte of a request yet is closed now.
    if (idle_ && buffer_.size() == 0) force_close();
  }

  void force_close() override {
    closed_ = true;
    if (slot_timer_) slot_timer_->cancel();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    head_timer_.cancel();
    deadline_.cancel();
    if (upstream_) upstream_->stream.socket().close(ec);
  }

  std::optional<Clock::time_point> idle_since() const override { return idle_since_; }

  // An exception on this connection's data path (see gateway/guarded.hpp):
  // count it once and close this connection; the process goes on serving.
  void on_internal_error(std::string_view what) noexcept {
    if (internal_error_) return;
    internal_error_ = true;
    try {
      spdlog::error("client {}: internal error, closing the connection: {}", peer_text_, what);
      worker_.metrics().add("sluice_internal_errors_total", "");
    } catch (...) {
      // Logging failed too; closing is all that is left.
    }
    force_close();
  }

 private:
  // Completion handlers go through guarded(): an exception ends this
  // connection, never the worker.
  template <class... Args>
  auto handler(void (ProxySession::*fn)(Args...)) {
    return guarded(shared_from_this(), [fn](ProxySession& self, auto&&... args) {
      (self.*fn)(std::forward<decltype(args)>(args)...);
    });
  }
  template <class Fn>
  auto handler(Fn fn) {
    return guarded(shared_from_this(), std::move(fn));
  }

  // Keep-alive idleness, as the worker sees it (for closing the longest idle
  // connections near the connection cap).
  void set_idle(bool idle) {
    if (idle == idle_since_.has_value()) return;
    if (idle) {
      idle_since_ = Clock::now();
    } else {
      idle_since_.reset();
    }
    worker_.idle_changed(idle ? 1 : -1);
  }

  // ---- Reading a request head ------------------------------------------

  void do_read_head() {
    if (draining_) return graceful_close();
    if (buffer_.size() == 0 && requests_ > 0) {
      // Keep-alive: wait until the next request's first byte is readable,
      // under the idle timeout, holding no buffer meanwhile.
      release_buffers();
      idle_ = true;
      set_idle(true);
      set_deadline(Side::kClient, worker_.config()->server.idle_timeout);
      stream_.async_read_some(buffer_.prepare(std::min(kIdleReadBytes, buffer_.max_size())),
                              handler(&ProxySession::on_first_bytes));
      return;
    }
    start_head_read();
  }

  void on_first_bytes(beast::error_code ec, std::size_t n) {
    idle_ = false;
    set_idle(false);
    if (ec) return close();  // idle timeout or the client went away: close quietly
    buffer_.commit(n);
    start_head_read();
  }

  // An idle connection keeps little beyond the session itself: the relay
  // buffer goes back to the worker, the parsers are freed, and a read buffer
  // that a large request grew is given back.
  void release_buffers() {
    worker_.return_relay_buffer(std::move(relay_buffer_));
    if (buffer_.size() == 0 && buffer_.capacity() > 2 * kIdleReadBytes) buffer_.shrink_to_fit();
    parser_.reset();
    res_parser_.reset();
  }

  void start_head_read() {
    // Each request is served by the config current when it starts, even on a
    // connection that was idle across a reload.
    config_ = worker_.config();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(config_->server.max_header_bytes));
    parser_->body_limit(config_->server.max_body_bytes);
    parser_->on_chunk_header(chunk_extension_limit_);
    // Whatever the parser must hold at once (the head, a chunk-size line, the
    // trailer section) fits within max_header_bytes or the request is refused:
    // one connection cannot grow the buffer without bound.
    buffer_.max_size(std::max(config_->server.max_header_bytes, buffer_.size()));
    idle_ = buffer_.size() == 0;  // nothing of a request yet: a drain may close it
    deadline_.clear();
    head_timed_out_ = false;
    head_timer_.expires_after(config_->server.header_timeout);
    const auto generation = ++head_generation_;
    head_timer_.async_wait(handler([generation](ProxySession& self, beast::error_code ec) {
      // Cancelled, or a stale expiry that raced with a head that arrived in time.
      if (ec || generation != self.head_generation_ || !self.parser_ ||
          self.parser_->is_header_done()) {
        return;
      }
      self.head_timed_out_ = true;
      beast::error_code ignored;
      self.stream_.socket().cancel(ignored);  // for the 408
      // Cancelling misses a read between two of its system calls: then the
      // socket is closed a little later.
      self.set_deadline(Side::kClient, kTimeoutBackstop);
    }));
    http::async_read_header(stream_, buffer_, *parser_, handler(&ProxySession::on_head));
  }

  void on_head(beast::error_code ec, std::size_t) {
    idle_ = false;
    head_timer_.cancel();
    ++head_generation_;
    started_ = Clock::now();
    info_.request_id.clear();
    info_.route = nullptr;
    response_headers_.clear();
    if (head_timed_out_) {
      return send_local(make_local_reply(408, "request head not received in time", new_id()), true);
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof) return close();
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return send_local(make_local_reply(431, "request head too large", new_id()), true);
    }
    if (ec == http::error::body_limit) {
      return send_local(make_local_reply(413, "request body too large", new_id()), true);
    }
    if (ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
        ec == asio::error::broken_pipe) {
      return close();
    }
    if (ec) {
      return send_local(make_local_reply(400, "malformed request: " + ec.message(), new_id()),
                        true);
    }
    ++requests_;
    auto& req = parser_->get();
    auto refusal =
        admit_request(req, {parser_->chunked(), parser_->is_done()}, peer_, *config_, info_);
    keep_alive_ = {.client_asked = info_.keep_alive};
    if (refusal) {
      const bool close = refusal->close_connection;
      return send_local(std::move(*refusal), close);
    }
    run_middleware();
  }

  bool body_done() const { return parser_->is_done(); }

  // ---- Middleware ---------------------------------------------------------

  void run_middleware() {
    auto& req = parser_->get();
    auto& ctx = pipeline_.begin(req.base());
    ctx.config = config_;
    ctx.route = info_.route;
    ctx.method = req.method_string();
    ctx.target = req.target();
    ctx.route_path = info_.target.route_path;
    ctx.client_ip = info_.client_ip;
    ctx.request_id = info_.request_id;
    ctx.started = started_;
    run_pipeline();
  }

  void run_pipeline() {
    if (closed_) return;  // the client is gone: nothing goes upstream for it
    auto result = pipeline_.advance(worker_.chain(), *this);
    if (result.step == MiddlewareStep::kPending) return;
    on_middleware_outcome(std::move(result.reply));
  }

  // An asynchronous step's completion resumes the pipeline after that step.
  MiddlewareDone take() override {
    return handler([](ProxySession& self, std::optional<LocalReply> reply) {
      if (reply) return self.on_middleware_outcome(std::move(reply));
      self.run_pipeline();
    });
  }

  // Every step continued (no reply), or one answered.
  void on_middleware_outcome(std::optional<LocalReply> reply) {
    response_headers_ = pipeline_.take_response_headers();
    if (!reply) return start_upstream();
    // A half-read body also ends the connection.
    const bool close = reply->close_connection || !body_done();
    send_local(std::move(*reply), close);
  }

  // ---- Upstream: choose, connect -----------------------------------------

  void start_upstream() {
    upstream_cfg_ = &config_->upstreams[info_.route->upstream_index];
    tried_.clear();
    try_next_server();
  }

  void try_next_server() {
    auto server = worker_.pools().pick(*upstream_cfg_, tried_);
    if (!server) {
      return upstream_failed(tried_.empty() ? UpstreamError::kNoServer
                                            : connect_error(last_connect_timed_out_));
    }
    server_index_ = *server;
    tried_.push_back(*server);
    upstream_timed_out_ = false;
    upstream_ = worker_.pools().take_idle(*upstream_cfg_, *server);
    upstream_reused_ = upstream_ != nullptr;
    if (upstream_) return send_request_head();
    connect_fresh();
  }

  // A new connection to server_index_, once the server is under its
  // max_connections.
  void connect_fresh() {
    upstream_reused_ = false;
    upstream_timed_out_ = false;
    upstream_ = worker_.pools().open(*upstream_cfg_, server_index_);
    if (!upstream_) return wait_for_connection();
    const auto& hp = upstream_cfg_->servers[server_index_];
    upstream_->address = hp;
    upstream_->server = hp.to_string();
    beast::error_code ec;
    auto address = asio::ip::make_address(hp.host, ec);
    if (!ec) {
      return connect_to({tcp::endpoint{address, hp.port}});
    }
    // A host name: resolve it (rare: connections are pooled), within the
    // connect deadline.
    resolver_ = std::make_unique<tcp::resolver>(asio::any_io_executor{stream_.get_executor()});
    resolve_timer_ = std::make_unique<asio::steady_timer>(
        asio::any_io_executor{stream_.get_executor()}, upstream_cfg_->connect_timeout);
    resolve_timer_->async_wait(handler([](ProxySession& self, beast::error_code ec) {
      if (!ec && self.resolver_) self.resolver_->cancel();
    }));
    resolver_->async_resolve(
        hp.host, std::to_string(hp.port),
        handler([](ProxySession& self, beast::error_code ec, tcp::resolver::results_type results) {
          const bool timed_out =
              ec == asio::error::operation_aborted &&
              self.resolve_timer_->expiry() <= asio::steady_timer::clock_type::now();
          self.resolve_timer_->cancel();
          if (timed_out) return self.on_connect(beast::error::timeout);
          if (ec) return self.on_connect(ec);
          std::vector<tcp::endpoint> endpoints;
          for (const auto& r : results) endpoints.push_back(r.endpoint());
          self.connect_to(std::move(endpoints));
        }));
  }

  // The server has max_connections already: wait up to connect_timeout for
  // one of them to close or come back idle, then answer 503.
  void wait_for_connection() {
    const auto generation = ++slot_generation_;
    waiting_for_slot_ = true;
    if (!slot_timer_) slot_timer_ = std::make_unique<SessionTimer>(stream_.get_executor());
    // One deadline per exchange, however often a woken request loses its turn.
    if (slot_deadline_ == Clock::time_point{}) {
      slot_deadline_ = Clock::now() + upstream_cfg_->connect_timeout;
    }
    slot_timer_->expires_at(slot_deadline_);
    slot_timer_->async_wait(handler([generation](ProxySession& self, beast::error_code ec) {
      if (ec || generation != self.slot_generation_ || !self.waiting_for_slot_) return;
      self.waiting_for_slot_ = false;
      self.count_upstream("connection_limit");
      self.upstream_failed(UpstreamError::kConnectionLimit);
    }));
    worker_.pools().wait_for_slot(
        *upstream_cfg_, server_index_, [weak = weak_from_this(), generation]() -> bool {
          auto self = weak.lock();
          if (!self || self->closed_ || generation != self->slot_generation_ ||
              !self->waiting_for_slot_) {
            return false;
          }
          self->waiting_for_slot_ = false;
          self->slot_timer_->cancel();
          try {
            self->upstream_ = self->worker_.pools().take_idle(*self->upstream_cfg_,
                                                              self->server_index_);
            self->upstream_reused_ = self->upstream_ != nullptr;
            if (self->upstream_) {
              self->send_request_head();
            } else {
              self->connect_fresh();
            }
          } catch (const std::exception& e) {
            self->on_internal_error(e.what());
            guarded_detail::reported = false;  // handled here, not by run_guarded
          }
          return true;
        });
  }

  void connect_to(std::vector<tcp::endpoint> endpoints) {
    set_deadline(Side::kUpstream, upstream_cfg_->connect_timeout);
    upstream_->stream.async_connect(
        endpoints, handler([](ProxySession& self, beast::error_code ec, const tcp::endpoint&) {
          self.on_connect(ec);
        }));
  }

  void on_connect(beast::error_code ec) {
    if (ec && draining_ && ec == asio::error::operation_aborted) {
      // Closed by a drain timeout, not by the server: no cool-down, no retry.
      upstream_.reset();
      return abort_exchange();
    }
    if (ec) {
      const bool timed_out = ec == beast::error::timeout || upstream_timed_out_;
      last_connect_timed_out_ = timed_out;
      spdlog::warn("upstream {} server {}: connect failed: {}", upstream_cfg_->name,
                   upstream_ ? upstream_->server : "?", ec.message());
      count_upstream(timed_out ? "timeout" : "connect_error");
      worker_.pools().mark_failed(*upstream_cfg_, server_index_);
      upstream_.reset();
      // Nothing was sent: an idempotent request may go to the next server, once.
      if (is_idempotent(parser_->get().method()) && tried_.size() < 2) return try_next_server();
      return upstream_failed(connect_error(timed_out));
    }
    worker_.pools().mark_ok(*upstream_cfg_, server_index_);
    worker_.metrics().add("sluice_upstream_connections_total",
                          scratch_labels({{"upstream", upstream_cfg_->name}}));
    beast::error_code ignored;
    upstream_->stream.socket().set_option(tcp::no_delay(true), ignored);
    send_request_head();
  }

  // ---- Upstream: the request ---------------------------------------------

  void send_request_head() {
    auto& req = parser_->get();
    // The head is serialized once (a retry after a failed connect reuses it).
    if (!request_rewritten_) {
      request_rewritten_ = true;
      need_continue_ = !parser_->is_done() && req.version() == 11 &&
                       beast::iequals(req[http::field::expect], "100-continue");
      serialize_request_head(req_head_, req.method_string(), upstream_target(*info_.route, req.target()),
                             req.base(),
                             ForwardedInfo{peer_text_, info_.forwarded_proto, req[http::field::host],
                                           info_.request_id, upstream_->server},
                             info_.body.chunked, to_std(parser_->content_length()));
    }
    req_head_pending_ = true;
    // Body bytes already read with the head: send head and body in one write.
    if (!parser_->is_done() && !need_continue_ && buffer_.size() > 0) return read_client_body();
    write_piece(upstream_->stream, req_head_, req_head_pending_, nullptr, 0, false, false,
                upstream_cfg_->response_timeout, handler(&ProxySession::on_request_head_sent));
  }

  // Writes a pending head (once), then `n` body bytes framed as chunked or
  // raw, then the last chunk if `last`, in one write.
  // The buffer list lives in the session: the write may outlast this call.
  template <class Handler>
  void write_piece(WorkerStream& stream, const std::string& head, bool& head_pending,
                   const char* data, std::size_t n, bool chunked, bool last,
                   std::chrono::milliseconds timeout, Handler&& handler) {
    const std::size_t count =
        frame_piece(out_buffers_, std::exchange(head_pending, false) ? std::string_view{head} : "",
                    data, n, chunked, last, chunk_prefix_);
    set_deadline(&stream == &stream_ ? Side::kClient : Side::kUpstream, timeout);
    asio::async_write(stream, std::span<const asio::const_buffer>{out_buffers_.data(), count},
                      std::forward<Handler>(handler));
  }

  void on_request_head_sent(beast::error_code ec, std::size_t) {
    if (ec) return upstream_io_failed(ec);
    if (parser_->is_done()) return read_response_head();
    if (need_continue_) {
      // The client waits for 100 Continue before sending its body: answer it ourselves.
      need_continue_ = false;
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      set_deadline(Side::kClient, config_->server.send_timeout);
      asio::async_write(stream_, asio::buffer(kContinue),
                        handler([](ProxySession& self, beast::error_code ec, std::size_t) {
                          if (ec) return self.abort_exchange();
                          self.read_client_body();
                        }));
      return;
    }
    read_client_body();
  }

  void read_client_body() {
    // Room for a large read once what was buffered is used up; bounded by
    // max_header_bytes (buffer_.max_size()), which also bounds chunk-size
    // lines and trailers.
    if (buffer_.size() == 0 && buffer_.capacity() < buffer_.max_size()) {
      buffer_.reserve(buffer_.max_size());
    }
    auto& body = parser_->get().body();
    body.data = relay_buffer();
    body.size = kRelayBufferSize;
    set_deadline(Side::kClient, config_->server.body_timeout);
    reading_body_ = true;
    body_timeout_backstop_ = false;
    http::async_read_some(stream_, buffer_, *parser_, handler(&ProxySession::on_client_body));
  }

  void on_client_body(beast::error_code ec, std::size_t) {
    reading_body_ = false;
    if (ec == http::error::need_buffer) ec = {};
    if (ec == http::error::body_limit) {
      // Already partly sent: the upstream connection is spoiled, the client gets 413.
      drop_upstream();
      return send_local(make_local_reply(413, "request body too large", info_.request_id), true);
    }
    if (ec) {
      if (client_timed_out_) {
        // No body byte for body_timeout: the request is cut off upstream and
        // the client told so (no response has started yet).
        drop_upstream();
        return send_local(
            make_local_reply(408, "request body not received in time", info_.request_id), true);
      }
      if (ec == http::error::buffer_overflow) {
        drop_upstream();
        return send_local(
            make_local_reply(400, "chunk-size line or trailer section too long", info_.request_id),
            true);
      }
      if (ec != asio::error::eof && ec != asio::error::connection_reset &&
          ec != beast::error::timeout && ec != http::error::partial_message &&
          ec != asio::error::operation_aborted) {
        drop_upstream();
        return send_local(make_local_reply(400, "bad request body: " + ec.message(), info_.request_id),
                          true);
      }
      return abort_exchange();
    }
    auto& body = parser_->get().body();
    const std::size_t n = kRelayBufferSize - body.size;
    const bool last = parser_->is_done();
    if (n == 0 && !last) return read_client_body();  // only framing was read
    write_piece(upstream_->stream, req_head_, req_head_pending_, relay_buffer(), n,
                info_.body.chunked, last, upstream_cfg_->response_timeout,
                handler(&ProxySession::on_upstream_body_written));
  }

  void on_upstream_body_written(beast::error_code ec, std::size_t) {
    if (ec) return upstream_io_failed(ec);
    if (parser_->is_done()) return read_response_head();
    read_client_body();
  }

  // ---- Upstream: the response --------------------------------------------

  void read_response_head() {
    res_parser_.emplace();
    res_parser_->body_limit(boost::none);
    res_parser_->header_limit(kMaxResponseHeadBytes);
    res_parser_->on_chunk_header(chunk_extension_limit_);
    upstream_->buffer.max_size(std::max(kMaxResponseHeadBytes, upstream_->buffer.size()));
    if (upstream_->buffer.capacity() < kUpstreamHeadBytes) {
      upstream_->buffer.reserve(kUpstreamHeadBytes);
    }
    if (parser_->get().method() == http::verb::head) res_parser_->skip(true);
    set_deadline(Side::kUpstream, upstream_cfg_->response_timeout);
    http::async_read_header(upstream_->stream, upstream_->buffer, *res_parser_,
                            handler(&ProxySession::on_response_head));
  }

  void on_response_head(beast::error_code ec, std::size_t) {
    if (ec) return upstream_io_failed(ec);
    auto& res = res_parser_->get();
    // Interim responses (100, 102, 103) are dropped; 101 cannot happen since
    // Upgrade is never forwarded.
    if (res.result_int() / 100 == 1) return read_response_head();

    // Sluice re-frames bodies itself, so a transfer coding other than chunked
    // (or chunked named twice) cannot be relayed faithfully.
    if (!relayable_transfer_coding(res.base())) {
      spdlog::warn("upstream {} server {}: unsupported response Transfer-Encoding",
                   upstream_cfg_->name, upstream_->server);
      count_upstream("protocol_error");
      drop_upstream();
      return upstream_failed(UpstreamError::kUnsupportedTransferCoding);
    }
    upstream_status_ = res.result_int();
    upstream_server_ = upstream_->server;
    count_upstream("ok");
    const bool upstream_keep_alive = res_parser_->keep_alive();
    upstream_reusable_ = upstream_keep_alive;
    const bool has_body = !res_parser_->is_done();
    const auto content_length = res_parser_->content_length();

    const bool client_http11 = parser_->get().version() == 11;
    const auto framing = frame_response(has_body, content_length.has_value(), client_http11);
    res_chunked_out_ = framing.chunked;
    keep_alive_.ends_with_close = framing.ends_with_close;
    client_keep_alive_ = keep_client(false);
    ResponseHeadOptions options;
    options.request_id = info_.request_id;
    options.extra = response_headers_;
    options.chunked = res_chunked_out_;
    options.content_length = to_std(content_length);
    options.keep_alive = client_keep_alive_;
    options.announce_keep_alive = !client_http11 && client_keep_alive_;
    serialize_response_head(res_head_, upstream_status_, res.reason(), res.base(), options);
    res_head_pending_ = true;
    // Body bytes already read with the head: send head and body in one write.
    if (!res_parser_->is_done() && upstream_->buffer.size() > 0) return read_upstream_body();
    write_piece(stream_, res_head_, res_head_pending_, nullptr, 0, false, false,
                config_->server.send_timeout, handler(&ProxySession::on_response_head_sent));
  }

  void on_response_head_sent(beast::error_code ec, std::size_t) {
    if (ec) return abort_exchange();
    if (res_parser_->is_done()) return finish_exchange();
    read_upstream_body();
  }

  void read_upstream_body() {
    // Room for a whole relay piece once what was buffered is used up.
    const std::size_t piece = std::min(kRelayBufferSize, upstream_->buffer.max_size());
    if (upstream_->buffer.size() == 0 && upstream_->buffer.capacity() < piece) {
      upstream_->buffer.reserve(piece);
    }
    auto& body = res_parser_->get().body();
    body.data = relay_buffer();
    body.size = kRelayBufferSize;
    set_deadline(Side::kUpstream, upstream_cfg_->response_timeout);
    http::async_read_some(upstream_->stream, upstream_->buffer, *res_parser_,
                          handler(&ProxySession::on_upstream_body));
  }

  void on_upstream_body(beast::error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      spdlog::warn("upstream {} server {}: response body failed: {}", upstream_cfg_->name,
                   upstream_->server, ec.message());
      // Nothing sent to the client yet: it gets a 502. Otherwise all that can
      // be done is to cut the client connection.
      // (The exchange was already counted "ok" when its head arrived.)
      if (res_head_pending_) {
        const bool timed_out = upstream_timed_out_;
        drop_upstream();
        upstream_status_ = 0;
        return upstream_failed(timed_out ? UpstreamError::kResponseTimedOut
                                         : UpstreamError::kMalformedResponseBody);
      }
      return abort_exchange();
    }
    auto& body = res_parser_->get().body();
    const std::size_t n = kRelayBufferSize - body.size;
    const bool last = res_parser_->is_done();
    if (n == 0 && !last) return read_upstream_body();
    write_piece(stream_, res_head_, res_head_pending_, relay_buffer(), n, res_chunked_out_, last,
                config_->server.send_timeout, handler(&ProxySession::on_client_body_written));
  }

  void on_client_body_written(beast::error_code ec, std::size_t) {
    if (ec) return abort_exchange();
    if (res_parser_->is_done()) return finish_exchange();
    read_upstream_body();
  }

  void finish_exchange() {
    // A connection goes back to the pool only after a complete, keep-alive exchange.
    if (upstream_reusable_ && res_parser_->is_done() && parser_->is_done() &&
        upstream_->buffer.size() == 0) {
      if (upstream_->buffer.capacity() > kUpstreamHeadBytes) upstream_->buffer.shrink_to_fit();
      worker_.pools().give_back(*upstream_cfg_, std::move(upstream_));
    }
    upstream_.reset();
    record(upstream_status_);
    reset_exchange();
    if (!client_keep_alive_) return graceful_close();
    do_read_head();
  }

  // ---- Deadlines -------------------------------------------------------------
  // One lazily re-armed deadline serves every I/O operation of the session. On
  // expiry the socket of that side is closed, failing its pending operation;
  // the *_timed_out_ flags tell a timeout from other errors.

  void set_deadline(Side side, Clock::duration timeout) {
    if (side == Side::kClient) client_timed_out_ = false;
    deadline_.expires_after(side, timeout, *this);
  }

 public:
  void on_deadline(Side side) {
    beast::error_code ignored;
    if (side == Side::kUpstream) {
      if (!upstream_) return;
      upstream_timed_out_ = true;
      upstream_->stream.socket().close(ignored);
    } else {
      client_timed_out_ = true;
      if (reading_body_ && !body_timeout_backstop_) {
        // A stalled request body still gets its 408: the read is cancelled,
        // not the socket closed. Cancelling misses a read that is between two
        // of its system calls, so a short backstop closes it in that case.
        body_timeout_backstop_ = true;
        stream_.socket().cancel(ignored);
        deadline_.expires_after(Side::kClient, kTimeoutBackstop, *this);
        return;
      }
      stream_.socket().close(ignored);
    }
  }

 private:

  // ---- Failures ------------------------------------------------------------

  void upstream_io_failed(beast::error_code ec) {
    const bool timed_out = ec == beast::error::timeout || upstream_timed_out_;
    if (!timed_out && may_retry_on_fresh_connection(ec)) {
      // A pooled connection the server had closed: nothing of this request
      // was answered, so it goes once more on a new connection.
      worker_.metrics().add("sluice_upstream_retries_total", "");
      drop_upstream();
      retried_on_fresh_ = true;
      return connect_fresh();
    }
    spdlog::warn("upstream {} server {}: {}", upstream_cfg_->name,
                 upstream_ ? upstream_->server : "?", ec.message());
    count_upstream(timed_out ? "timeout" : "reset");
    drop_upstream();
    upstream_failed(exchange_error(timed_out));
  }

  // A request that failed on a reused connection before any response byte
  // may be sent again once, on a new connection, when it is idempotent and
  // has no body (so nothing of it is lost by having been sent).
  bool may_retry_on_fresh_connection(beast::error_code ec) const {
    const bool closed_early = ec == http::error::end_of_stream || ec == asio::error::eof ||
                              ec == asio::error::connection_reset ||
                              ec == asio::error::broken_pipe;
    return closed_early && upstream_reused_ && !retried_on_fresh_ && info_.body.done &&
           is_idempotent(parser_->get().method()) && upstream_ &&
           upstream_->buffer.size() == 0 && (!res_parser_ || !res_parser_->got_some());
  }

  void upstream_failed(UpstreamError error) {
    // The request body may be half read: close after the reply unless it is done.
    send_local(make_local_reply(status_for(error), message_for(error), info_.request_id),
               !parser_->is_done());
  }

  void drop_upstream() {
    if (!upstream_) return;
    beast::error_code ignored;
    upstream_->stream.socket().close(ignored);
    upstream_.reset();
  }

  void abort_exchange() {
    drop_upstream();
    // 499 (nginx's "client closed request") when no status was sent yet.
    if (parser_ && parser_->is_header_done()) record(upstream_status_ ? upstream_status_ : 499);
    close();
  }

  void count_upstream(std::string_view outcome) {
    worker_.series().count_upstream(config_, *upstream_cfg_, outcome);
  }

  // ---- Local replies and closing -----------------------------------------

  // Whether the connection stays open after the response now being sent.
  bool keep_client(bool must_close) const {
    auto facts = keep_alive_;
    facts.draining = draining_;
    facts.must_close = must_close;
    return keep_client_alive(facts);
  }

  void send_local(LocalReply reply, bool close_after) {
    if (info_.request_id.empty()) generate_request_id(info_.request_id);
    local_res_.emplace(static_cast<http::status>(reply.status), 11);
    auto& res = *local_res_;
    res.set(http::field::server, "sluice");
    res.set(http::field::content_type, reply.content_type);
    res.set("X-Request-Id", info_.request_id);
    for (auto& [name, value] : response_headers_) res.set(name, value);
    for (auto& [name, value] : reply.headers) res.set(name, value);
    if (parser_ && parser_->get().method() != http::verb::head) res.body() = std::move(reply.body);
    res.prepare_payload();
    if (parser_ && parser_->get().method() == http::verb::head) {
      res.content_length(reply.body.size());
    }
    const bool keep = keep_client(close_after || requests_ == 0);
    res.keep_alive(keep);
    if (keep && parser_ && parser_->get().version() == 10) {
      res.set(http::field::connection, "keep-alive");
    }
    local_status_ = reply.status;
    set_deadline(Side::kClient, config_->server.send_timeout);
    http::async_write(stream_, res,
                      handler([keep](ProxySession& self, beast::error_code ec, std::size_t) {
                        self.record(self.local_status_);
                        self.local_res_.reset();
                        self.reset_exchange();
                        if (ec) return self.close();
                        if (!keep) return self.graceful_close();
                        self.do_read_head();
                      }));
  }

  // Half-close and drain what the client still sends, so that it reads our
  // reply rather than a reset (like nginx's lingering close).
  void graceful_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    linger_bytes_ = 0;
    set_deadline(Side::kClient, kLingerTimeout);
    linger();
  }

  void linger() {
    stream_.async_read_some(asio::buffer(discard_buffer(), 4096),
                            handler([](ProxySession& self, beast::error_code ec, std::size_t n) {
                              self.linger_bytes_ += n;
                              if (ec || self.linger_bytes_ > kLingerMaxBytes) return self.close();
                              self.linger();
                            }));
  }

  void close() {
    closed_ = true;
    beast::error_code ec;
    stream_.socket().close(ec);
    head_timer_.cancel();
    deadline_.cancel();
    if (slot_timer_) slot_timer_->cancel();
  }

  void record(unsigned status) {
    if (recorded_) return;
    recorded_ = true;
    ExchangeRecord record;
    record.route = info_.route;
    record.have_head = parser_ && parser_->is_header_done();
    if (record.have_head) {
      record.method = parser_->get().method_string();
      record.target = info_.original_target.empty() ? std::string_view{parser_->get().target()}
                                                    : std::string_view{info_.original_target};
    }
    record.client_ip = record.have_head ? info_.client_ip : peer_;
    record.request_id = info_.request_id;
    record.status = status;
    record.upstream_status = upstream_status_;
    record.local_status = local_status_;
    record.upstream_server = upstream_server_;
    record.started = started_;
    log_exchange(record, config_, worker_.series(), worker_.chain().observers);
  }

  void reset_exchange() {
    res_parser_.reset();
    upstream_status_ = 0;
    local_status_ = 0;
    upstream_server_.clear();
    info_.original_target.clear();
    upstream_reusable_ = false;
    request_rewritten_ = false;
    need_continue_ = false;
    recorded_ = false;
    last_connect_timed_out_ = false;
    upstream_reused_ = false;
    retried_on_fresh_ = false;
    slot_deadline_ = {};
  }

  std::string new_id() {
    generate_request_id(info_.request_id);
    return info_.request_id;
  }

  char* relay_buffer() {
    if (!relay_buffer_) relay_buffer_ = worker_.take_relay_buffer();
    return relay_buffer_.get();
  }

  Worker& worker_;
  WorkerStream stream_;
  asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, WorkerExecutor> head_timer_;
  Deadline<WorkerExecutor, Side> deadline_;
  bool upstream_timed_out_ = false;
  bool client_timed_out_ = false;
  beast::flat_buffer buffer_;
  IpAddress peer_;
  std::string peer_text_;
  std::shared_ptr<const Config> config_;

  std::optional<http::request_parser<http::buffer_body>> parser_;
  std::optional<http::response_parser<http::buffer_body>> res_parser_;
  std::string req_head_;  // serialized heads; their capacity is reused
  std::string res_head_;
  ChunkPrefix chunk_prefix_;
  PieceBuffers out_buffers_;  // one write in flight at a time
  std::optional<http::response<http::string_body>> local_res_;
  std::unique_ptr<char[]> relay_buffer_;
  Pipeline pipeline_;
  std::unique_ptr<tcp::resolver> resolver_;
  std::unique_ptr<asio::steady_timer> resolve_timer_;
  using SessionTimer = asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, WorkerExecutor>;
  std::unique_ptr<SessionTimer> slot_timer_;  // waiting for an upstream connection
  std::uint64_t slot_generation_ = 0;
  Clock::time_point slot_deadline_{};  // set once per exchange
  bool waiting_for_slot_ = false;
  bool closed_ = false;                // the client socket was closed
  bool reading_body_ = false;          // a request body read is in flight
  bool body_timeout_backstop_ = false;

  const UpstreamConfig* upstream_cfg_ = nullptr;
  std::unique_ptr<UpstreamConnection> upstream_;
  std::vector<std::size_t> tried_;
  std::size_t server_index_ = 0;
  RequestInfo info_;  // the current request, as admitted
  HeaderList response_headers_;
  std::string upstream_server_;
  Clock::time_point started_{Clock::now()};

  std::uint64_t requests_ = 0;
  std::uint64_t head_generation_ = 0;
  std::size_t linger_bytes_ = 0;
  unsigned upstream_status_ = 0;
  unsigned local_status_ = 0;
  bool head_timed_out_ = false;
  bool idle_ = false;
  bool draining_ = false;
  KeepAliveFacts keep_alive_;     // what the current exchange knows of keep-alive
  bool client_keep_alive_ = false;  // the response sent keeps the connection
  bool upstream_reusable_ = false;
  bool request_rewritten_ = false;
  bool req_head_pending_ = false;
  bool res_head_pending_ = false;
  bool res_chunked_out_ = false;
  bool need_continue_ = false;
  bool recorded_ = false;
  bool last_connect_timed_out_ = false;
  bool upstream_reused_ = false;     // upstream_ came from the pool
  bool retried_on_fresh_ = false;
  bool internal_error_ = false;
  std::optional<Clock::time_point> idle_since_;  // waiting for a kept-alive request
  ChunkExtensionLimit chunk_extension_limit_;
};

}  // namespace

void start_client_session(Worker& worker, WorkerSocket socket) {
  auto session = std::make_shared<ProxySession>(worker, std::move(socket));
  if (worker.draining()) session->on_drain();
  session->start();
}

}  // namespace sluice
