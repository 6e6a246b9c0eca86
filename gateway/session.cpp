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

#include "gateway/guarded.hpp"
#include "gateway/http_limits.hpp"
#include "gateway/local_reply.hpp"
#include "gateway/metrics.hpp"
#include "gateway/request_target.hpp"
#include "gateway/router.hpp"
#include "gateway/worker.hpp"
#include "upstream/proxy_headers.hpp"
#include "upstream/upstream_pool.hpp"

namespace sluice {
namespace {

// Every `outcome` of sluice_upstream_requests_total that count_upstream() is given.
constexpr std::string_view kUpstreamOutcomes[] = {"ok",    "connect_error",  "timeout",
                                                  "reset", "protocol_error", "connection_limit"};

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

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
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

class ProxySession final : public ClientSession, public std::enable_shared_from_this<ProxySession> {
 public:
  ProxySession(Worker& worker, WorkerSocket socket)
      : worker_(worker),
        stream_(std::move(socket)),
        head_timer_(stream_.get_executor()),
        deadline_timer_(stream_.get_executor()) {
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
    deadline_timer_.cancel();
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
    clear_deadline();
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
    request_id_.clear();
    route_ = nullptr;
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
    // Both framings at once is request smuggling material: refuse it.
    if (req.count(http::field::content_length) && req.count(http::field::transfer_encoding)) {
      return send_local(
          make_local_reply(400, "both Content-Length and Transfer-Encoding", new_id()), true);
    }
    if (req.version() == 11 && req.count(http::field::host) == 0) {
      return send_local(make_local_reply(400, "missing Host header", new_id()), true);
    }
    if (req.count(http::field::host) > 1) {
      return send_local(make_local_reply(400, "more than one Host header", new_id()), true);
    }
    if (req.count(http::field::transfer_encoding) > 1) {
      return send_local(make_local_reply(400, "more than one Transfer-Encoding header", new_id()),
                        true);
    }
    if (req.count(http::field::transfer_encoding) &&
        !beast::iequals(req[http::field::transfer_encoding], "chunked")) {
      // chunked twice, or not last, is faulty framing; anything else (gzip,
      // chunked) is a coding Sluice does not implement.
      std::size_t chunked = 0;
      bool chunked_last = false;
      for (const auto& coding : http::token_list{req[http::field::transfer_encoding]}) {
        chunked_last = beast::iequals(coding, "chunked");
        chunked += chunked_last ? 1 : 0;
      }
      return send_local(chunked > 1 || (chunked == 1 && !chunked_last)
                            ? make_local_reply(400, "chunked must be the only transfer coding",
                                               new_id())
                            : make_local_reply(501, "transfer coding not supported", new_id()),
                        true);
    }
    // HTTP/1.0 has no transfer codings: such a message's framing is faulty.
    if (req.version() == 10 && req.count(http::field::transfer_encoding)) {
      return send_local(make_local_reply(400, "Transfer-Encoding in an HTTP/1.0 request", new_id()),
                        true);
    }
    // The asterisk form names the server itself, for OPTIONS only.
    if (req.target() == "*" && req.method() != http::verb::options) {
      return send_local(make_local_reply(400, "\"*\" target with a method other than OPTIONS",
                                         new_id()),
                        true);
    }
    // Host and request-target hygiene: see gateway/request_target.hpp.
    if (req.count(http::field::host)) {
      if (const auto error = check_host(req[http::field::host]); !error.empty()) {
        return send_local(make_local_reply(400, error, new_id()), true);
      }
    }
    // Absolute-form: the authority replaces Host and the target becomes
    // origin-form, so routing and upstream see the same host.
    if (!req.target().starts_with("/") && req.target() != "*") {
      auto absolute = split_absolute_form(req.target());
      if (!absolute.error.empty()) {
        return send_local(make_local_reply(400, absolute.error, new_id()), true);
      }
      original_target_.assign(req.target());  // the access log shows what the client sent
      req.set(http::field::host, absolute.authority);
      req.target(absolute.target);
    }
    // One normalized target, forwarded; its route path is routed and keyed.
    if (const auto error = normalize_target(req.target(), target_); !error.empty()) {
      return send_local(make_local_reply(400, error, new_id()), true);
    }
    if (target_.target != req.target()) {
      if (original_target_.empty()) original_target_.assign(req.target());
      req.target(target_.target);
    }
    client_keep_alive_ = req.keep_alive() && !draining_;
    // Hop-by-hop headers (and the names Connection lists) go before anything
    // reads the head, so a client cannot hide X-Request-Id and the like.
    request_chunked_ = parser_->chunked();
    request_body_empty_ = parser_->is_done();
    strip_hop_by_hop(req.base());
    // Names with "_" reach CGI-style servers as the "-" names they resemble.
    switch (config_->server.headers_with_underscores) {
      case ServerConfig::Underscores::kAllow:
        break;
      case ServerConfig::Underscores::kDrop:
        erase_underscore_fields(req.base());
        break;
      case ServerConfig::Underscores::kReject:
        if (erase_underscore_fields(req.base()) > 0) {
          return send_local(make_local_reply(400, "header name with an underscore", new_id()),
                            true);
        }
        break;
    }
    auto incoming_id = req["X-Request-Id"];
    if (is_acceptable_request_id(incoming_id)) {
      request_id_.assign(incoming_id);
    } else {
      generate_request_id(request_id_);
    }

    // Client IP: the peer, or the right-most untrusted X-Forwarded-For entry.
    std::vector<std::string_view> xff;
    for (auto [it, end] = req.equal_range("X-Forwarded-For"); it != end; ++it) {
      xff.emplace_back(it->value());
    }
    client_ip_ = resolve_client_ip(peer_, xff, config_->server.trusted_proxies);
    // The scheme a trusted proxy saw is kept; anyone else's is replaced.
    forwarded_proto_ = "http";
    if (is_trusted(peer_, config_->server.trusted_proxies)) {
      auto proto = req["X-Forwarded-Proto"];
      if (beast::iequals(proto, "https")) forwarded_proto_ = "https";
    }

    auto decision =
        select_route(*config_, req.method_string(), target_.route_path, req[http::field::host]);
    if (decision.kind == RouteDecision::Kind::kNotFound) {
      return send_local(make_local_reply(404, "no route matches", request_id_), !body_done());
    }
    if (decision.kind == RouteDecision::Kind::kMethodNotAllowed) {
      auto reply = make_local_reply(405, "method not allowed", request_id_);
      reply.headers.emplace_back("Allow", decision.allow);
      return send_local(std::move(reply), !body_done());
    }
    route_ = decision.route;
    run_middleware();
  }

  bool body_done() const { return parser_->is_done(); }

  // ---- Middleware ---------------------------------------------------------

  void run_middleware() {
    auto& req = parser_->get();
    if (!ctx_) {
      // One context per connection, reused by its requests.
      ctx_ = std::make_unique<RequestContext>();
      ctx_->header = [this](std::string_view name) -> std::optional<std::string_view> {
        auto& r = parser_->get();
        auto it = r.find(name);
        if (it == r.end()) return std::nullopt;
        return std::string_view{it->value()};
      };
      ctx_->header_count = [this](std::string_view name) -> std::size_t {
        return parser_->get().count(name);
      };
    }
    ctx_->response_headers.clear();
    ctx_->config = config_;
    ctx_->route = route_;
    ctx_->method = req.method_string();
    ctx_->target = req.target();
    ctx_->route_path = target_.route_path;
    ctx_->client_ip = client_ip_;
    ctx_->request_id = request_id_;
    ctx_->started = started_;
    next_middleware(0);
  }

  void next_middleware(std::size_t index) {
    if (closed_) return;  // the client is gone: nothing goes upstream for it
    auto& chain = worker_.chain();
    if (index >= chain.size()) {
      response_headers_ = std::move(ctx_->response_headers);
      return start_upstream();
    }
    if (!chain[index]->applies(*ctx_)) return next_middleware(index + 1);
    chain[index]->on_request(
        *ctx_, handler([index](ProxySession& self, std::optional<LocalReply> reply) {
          if (reply) {
            self.response_headers_ = std::move(self.ctx_->response_headers);
            // A half-read body also ends the connection.
            const bool close = reply->close_connection || !self.body_done();
            return self.send_local(std::move(*reply), close);
          }
          self.next_middleware(index + 1);
        }));
  }

  // ---- Upstream: choose, connect -----------------------------------------

  void start_upstream() {
    upstream_cfg_ = &config_->upstreams[route_->upstream_index];
    tried_.clear();
    try_next_server();
  }

  void try_next_server() {
    auto server = worker_.pools().pick(*upstream_cfg_, tried_);
    if (!server) {
      if (tried_.empty()) {
        return send_local(
            make_local_reply(503, "no upstream server available (all in cool-down)", request_id_),
            !body_done());
      }
      return upstream_failed(last_connect_timed_out_ ? 504 : 502, "upstream connect failed");
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
      self.send_local(
          make_local_reply(503, "upstream connection limit reached", self.request_id_),
          !self.body_done());
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
      return upstream_failed(timed_out ? 504 : 502, "upstream connect failed");
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
      serialize_request_head(req_head_, req.method_string(), upstream_target(*route_, req.target()),
                             req.base(),
                             ForwardedInfo{peer_text_, forwarded_proto_, req[http::field::host],
                                           request_id_, upstream_->server},
                             request_chunked_, to_std(parser_->content_length()));
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
    auto& buffers = out_buffers_;
    std::size_t count = 0;
    if (head_pending) {
      buffers[count++] = asio::buffer(head);
      head_pending = false;
    }
    if (chunked && n > 0) {
      const int len = std::snprintf(chunk_prefix_, sizeof chunk_prefix_, "%zx\r\n", n);
      buffers[count++] = asio::buffer(chunk_prefix_, static_cast<std::size_t>(len));
    }
    if (n > 0) buffers[count++] = asio::buffer(data, n);
    if (chunked && n > 0) buffers[count++] = asio::buffer("\r\n", 2);
    if (chunked && last) buffers[count++] = asio::buffer("0\r\n\r\n", 5);
    set_deadline(&stream == &stream_ ? Side::kClient : Side::kUpstream, timeout);
    asio::async_write(stream, std::span<const asio::const_buffer>{buffers.data(), count},
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
      return send_local(make_local_reply(413, "request body too large", request_id_), true);
    }
    if (ec) {
      if (client_timed_out_) {
        // No body byte for body_timeout: the request is cut off upstream and
        // the client told so (no response has started yet).
        drop_upstream();
        return send_local(
            make_local_reply(408, "request body not received in time", request_id_), true);
      }
      if (ec == http::error::buffer_overflow) {
        drop_upstream();
        return send_local(
            make_local_reply(400, "chunk-size line or trailer section too long", request_id_),
            true);
      }
      if (ec != asio::error::eof && ec != asio::error::connection_reset &&
          ec != beast::error::timeout && ec != http::error::partial_message &&
          ec != asio::error::operation_aborted) {
        drop_upstream();
        return send_local(make_local_reply(400, "bad request body: " + ec.message(), request_id_),
                          true);
      }
      return abort_exchange();
    }
    auto& body = parser_->get().body();
    const std::size_t n = kRelayBufferSize - body.size;
    const bool last = parser_->is_done();
    if (n == 0 && !last) return read_client_body();  // only framing was read
    write_piece(upstream_->stream, req_head_, req_head_pending_, relay_buffer(), n,
                request_chunked_, last, upstream_cfg_->response_timeout,
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
    if (res.count(http::field::transfer_encoding) > 1 ||
        (res.count(http::field::transfer_encoding) == 1 &&
         !beast::iequals(trim_ows(res[http::field::transfer_encoding]), "chunked"))) {
      spdlog::warn("upstream {} server {}: unsupported response Transfer-Encoding",
                   upstream_cfg_->name, upstream_->server);
      count_upstream("protocol_error");
      drop_upstream();
      return upstream_failed(502, "upstream response has an unsupported transfer coding");
    }
    upstream_status_ = res.result_int();
    upstream_server_ = upstream_->server;
    count_upstream("ok");
    const bool upstream_keep_alive = res_parser_->keep_alive();
    upstream_reusable_ = upstream_keep_alive;
    const bool has_body = !res_parser_->is_done();
    const auto content_length = res_parser_->content_length();

    // Framing towards the client: Content-Length passes through; a body of
    // unknown length is chunked for HTTP/1.1 and ends with the connection for 1.0.
    const bool client_http11 = parser_->get().version() == 11;
    res_chunked_out_ = false;
    if (has_body && !content_length) {
      if (client_http11) {
        res_chunked_out_ = true;
      } else {
        client_keep_alive_ = false;
      }
    }
    if (draining_) client_keep_alive_ = false;
    ResponseHeadOptions options;
    options.request_id = request_id_;
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
        return upstream_failed(timed_out ? 504 : 502, timed_out
                                                          ? "upstream response timed out"
                                                          : "upstream response body is malformed");
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
  // One timer per session serves every I/O deadline, re-armed lazily: moving
  // the deadline later (every read and write does) costs no syscall; the timer
  // is re-armed only when it fires early or the deadline moves earlier. On
  // expiry the socket of that side is closed, failing its pending operation;
  // the *_timed_out_ flags tell a timeout from other errors.

  enum class Side { kClient, kUpstream };

  void set_deadline(Side side, Clock::duration timeout) {
    deadline_side_ = side;
    if (side == Side::kClient) client_timed_out_ = false;
    deadline_ = Clock::now() + timeout;
    if (!deadline_armed_ || deadline_ < deadline_timer_.expiry()) arm_deadline();
  }

  void clear_deadline() { deadline_ = Clock::time_point::max(); }

  void arm_deadline() {
    deadline_armed_ = true;
    deadline_timer_.expires_at(deadline_);  // a pending wait is superseded (generation)
    const auto generation = ++deadline_generation_;
    deadline_timer_.async_wait(handler([generation](ProxySession& self, beast::error_code ec) {
      if (generation != self.deadline_generation_) return;
      self.deadline_armed_ = false;
      if (ec || self.deadline_ == Clock::time_point::max()) return;   // closed, or cleared
      if (Clock::now() < self.deadline_) return self.arm_deadline();  // moved later
      self.on_deadline();
    }));
  }

  void on_deadline() {
    beast::error_code ignored;
    if (deadline_side_ == Side::kUpstream) {
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
        deadline_ = Clock::now() + kTimeoutBackstop;
        arm_deadline();
        return;
      }
      stream_.socket().close(ignored);
    }
  }

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
    upstream_failed(timed_out ? 504 : 502,
                    timed_out ? "upstream response timed out" : "upstream connection failed");
  }

  // A request that failed on a reused connection before any response byte
  // may be sent again once, on a new connection, when it is idempotent and
  // has no body (so nothing of it is lost by having been sent).
  bool may_retry_on_fresh_connection(beast::error_code ec) const {
    const bool closed_early = ec == http::error::end_of_stream || ec == asio::error::eof ||
                              ec == asio::error::connection_reset ||
                              ec == asio::error::broken_pipe;
    return closed_early && upstream_reused_ && !retried_on_fresh_ && request_body_empty_ &&
           is_idempotent(parser_->get().method()) && upstream_ &&
           upstream_->buffer.size() == 0 && (!res_parser_ || !res_parser_->got_some());
  }

  void upstream_failed(unsigned status, std::string_view message) {
    // The request body may be half read: close after the reply unless it is done.
    send_local(make_local_reply(status, message, request_id_), !parser_->is_done());
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

  void send_local(LocalReply reply, bool close_after) {
    if (request_id_.empty()) generate_request_id(request_id_);
    local_res_.emplace(static_cast<http::status>(reply.status), 11);
    auto& res = *local_res_;
    res.set(http::field::server, "sluice");
    res.set(http::field::content_type, reply.content_type);
    res.set("X-Request-Id", request_id_);
    for (auto& [name, value] : response_headers_) res.set(name, value);
    for (auto& [name, value] : reply.headers) res.set(name, value);
    if (parser_ && parser_->get().method() != http::verb::head) res.body() = std::move(reply.body);
    res.prepare_payload();
    if (parser_ && parser_->get().method() == http::verb::head) {
      res.content_length(reply.body.size());
    }
    const bool keep = !close_after && client_keep_alive_ && !draining_ && requests_ > 0;
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
    deadline_timer_.cancel();
    if (slot_timer_) slot_timer_->cancel();
  }

  void record(unsigned status) {
    if (recorded_) return;
    recorded_ = true;
    const std::string_view route = route_ ? std::string_view{route_->name} : std::string_view{};
    const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    worker_.series().count_request(config_, route_, status, seconds);
    if (worker_.chain().empty()) return;
    ExchangeSummary summary;
    summary.route = route;
    const bool have_head = parser_ && parser_->is_header_done();
    if (have_head) {
      summary.method = parser_->get().method_string();
      summary.target =
          original_target_.empty() ? std::string_view{parser_->get().target()} : original_target_;
    }
    summary.status = status;
    summary.client_ip = have_head ? client_ip_ : peer_;
    summary.request_id = request_id_;
    // Both branches string_view: a ?: with a std::string would view a temporary.
    summary.upstream_server =
        upstream_status_ ? std::string_view{upstream_server_} : std::string_view{};
    summary.duration_seconds = seconds;
    summary.local = local_status_ == status && !upstream_status_;
    for (auto& mw : worker_.chain()) mw->on_complete(*config_, summary);
  }

  void reset_exchange() {
    res_parser_.reset();
    upstream_status_ = 0;
    local_status_ = 0;
    upstream_server_.clear();
    original_target_.clear();
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
    generate_request_id(request_id_);
    return request_id_;
  }

  char* relay_buffer() {
    if (!relay_buffer_) relay_buffer_ = worker_.take_relay_buffer();
    return relay_buffer_.get();
  }

  Worker& worker_;
  WorkerStream stream_;
  asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, WorkerExecutor> head_timer_;
  asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, WorkerExecutor> deadline_timer_;
  Clock::time_point deadline_ = Clock::time_point::max();
  std::uint64_t deadline_generation_ = 0;
  Side deadline_side_ = Side::kClient;
  bool deadline_armed_ = false;
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
  char chunk_prefix_[24];
  std::array<asio::const_buffer, 5> out_buffers_;  // one write in flight at a time
  std::optional<http::response<http::string_body>> local_res_;
  std::unique_ptr<char[]> relay_buffer_;
  std::unique_ptr<RequestContext> ctx_;
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

  const RouteConfig* route_ = nullptr;
  const UpstreamConfig* upstream_cfg_ = nullptr;
  std::unique_ptr<UpstreamConnection> upstream_;
  std::vector<std::size_t> tried_;
  std::size_t server_index_ = 0;
  HeaderList response_headers_;
  std::string request_id_;
  std::string original_target_;  // set only when the target was rewritten
  NormalizedTarget target_;      // this request's forwarded target and route path
  std::string_view forwarded_proto_ = "http";
  std::string upstream_server_;
  IpAddress client_ip_;
  Clock::time_point started_{Clock::now()};

  std::uint64_t requests_ = 0;
  std::uint64_t head_generation_ = 0;
  std::size_t linger_bytes_ = 0;
  unsigned upstream_status_ = 0;
  unsigned local_status_ = 0;
  bool head_timed_out_ = false;
  bool idle_ = false;
  bool draining_ = false;
  bool client_keep_alive_ = false;
  bool upstream_reusable_ = false;
  bool request_rewritten_ = false;
  bool request_chunked_ = false;
  bool req_head_pending_ = false;
  bool res_head_pending_ = false;
  bool res_chunked_out_ = false;
  bool need_continue_ = false;
  bool recorded_ = false;
  bool last_connect_timed_out_ = false;
  bool request_body_empty_ = false;  // the request had no body at all
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

void seed_session_metrics(const Config& config, MetricsShard& metrics) {
  for (const auto& route : config.routes) {
    metrics.declare_histogram("sluice_http_request_duration_seconds",
                              scratch_labels({{"route", route.name}}));
  }
  for (const auto& upstream : config.upstreams) {
    metrics.declare("sluice_upstream_connections_total",
                    scratch_labels({{"upstream", upstream.name}}));
    for (const auto outcome : kUpstreamOutcomes) {
      metrics.declare("sluice_upstream_requests_total",
                      scratch_labels({{"upstream", upstream.name}, {"outcome", outcome}}));
    }
  }
}

}  // namespace sluice
