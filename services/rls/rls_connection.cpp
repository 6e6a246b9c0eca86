#include "services/rls/rls_connection.hpp"

#include <nghttp2/nghttp2.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "gateway/session/grpc_reply.hpp"
#include "gateway/tls/server_tls.hpp"
#include "middleware/ratelimit/admin/bucket_endpoint.hpp"
#include "services/rls/rls_call.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
using error_code = boost::system::error_code;

constexpr std::string_view kMethodPath =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
constexpr std::uint32_t kMaxStreams = 128;
constexpr std::size_t kMaxBuffered = 4u << 20;  // per connection, messages being read
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr auto kMaxDeadline = std::chrono::milliseconds(60000);  // a longer grpc-timeout: this
constexpr std::uint32_t kInternal = 13;

std::atomic<std::size_t> open_connections{0};  // in the process

class Connection;
// This worker's connections, for the drain.
thread_local std::vector<std::weak_ptr<Connection>> worker_connections;
using namespace grpc_code;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(WorkerSocket socket, std::shared_ptr<const ServerTls> tls,
             std::weak_ptr<BucketWorker> worker, std::chrono::milliseconds idle)
      : stream_(std::move(socket)),
        tls_(std::move(tls)),
        worker_(std::move(worker)),
        idle_(idle),
        timer_(stream_.socket().get_executor()) {
    ++open_connections;
  }

  ~Connection() {
    --open_connections;
    if (session_) nghttp2_session_del(session_);
  }

  void start() {
    std::erase_if(worker_connections, [](const auto& weak) { return weak.expired(); });
    worker_connections.push_back(weak_from_this());
    if (!tls_) return serve();
    stream_.use_tls(tls_->context().native_handle(), tls_);
    arm_timer(kHandshakeTimeout);
    stream_.tls().async_handshake([self = shared_from_this()](error_code ec) {
      if (ec || self->closed_) return self->close();
      self->serve();
    });
  }

  // GOAWAY: no new call; the calls under way finish, then the connection closes.
  void drain() {
    if (!session_ || closed_) return close();
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                          nullptr, 0);
    draining_ = true;
    flush();
  }

 private:
  struct Call {
    bool path_ok = false;
    bool grpc = false;
    bool too_big = false;
    bool answered = false;
    std::optional<std::chrono::milliseconds> timeout;
    std::string body;  // the gRPC frame(s) as read
    std::unique_ptr<asio::steady_timer> deadline;
    std::string out;  // the response frame
    std::size_t sent = 0;
  };

  void serve() {
    nghttp2_session_callbacks* callbacks = nullptr;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &Connection::on_begin);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, &Connection::on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &Connection::on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &Connection::on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &Connection::on_close);
    nghttp2_session_server_new(&session_, callbacks, this);
    nghttp2_session_callbacks_del(callbacks);
    const nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxStreams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384}};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
    arm_timer(idle_);
    read();
    flush();
  }

  // The handshake's bound, then the idle one: when it passes with no call
  // under way, GOAWAY and the close (a call under way re-arms it as it ends).
  void arm_timer(std::chrono::milliseconds after) {
    timer_.expires_after(after);
    timer_.async_wait([weak = weak_from_this()](error_code ec) {
      auto self = weak.lock();
      if (!self || ec || self->closed_) return;
      if (!self->session_) return self->close();  // the handshake took too long
      const auto quiet = std::chrono::steady_clock::now() - self->last_call_;
      if (!self->calls_.empty() || quiet < self->idle_) {
        return self->arm_timer(self->idle_ - std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  std::min<std::chrono::steady_clock::duration>(
                                                      quiet, self->idle_)) +
                               std::chrono::milliseconds(1));
      }
      self->drain();
    });
  }

  void read() {
    stream_.async_read_some(asio::buffer(in_),
                            [self = shared_from_this()](error_code ec, std::size_t n) {
                              if (self->closed_) return;
                              if (ec) return self->close();
                              // Answers submitted meanwhile are sent after (flush below).
                              self->receiving_ = true;
                              const auto used = nghttp2_session_mem_recv(
                                  self->session_, reinterpret_cast<const std::uint8_t*>(
                                                      self->in_.data()), n);
                              self->receiving_ = false;
                              if (used < 0) return self->close();
                              self->flush();
                              if (!self->closed_) self->read();
                            });
  }

  void flush() {
    if (writing_ || closed_ || receiving_) return;
    out_.clear();
    for (;;) {
      const std::uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) return close();
      if (n == 0) break;
      out_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
      if (out_.size() >= 65536) break;
    }
    if (out_.empty()) {
      const bool done = draining_ && calls_.empty();
      if (done || (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_))) {
        close();
      }
      return;
    }
    writing_ = true;
    asio::async_write(stream_, asio::buffer(out_),
                      [self = shared_from_this()](error_code ec, std::size_t) {
                        self->writing_ = false;
                        if (ec) return self->close();
                        self->flush();
                      });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    for (auto& [id, call] : calls_) {
      if (call.deadline) call.deadline->cancel();
    }
    error_code ignored;
    stream_.socket().close(ignored);
  }

  // ---- nghttp2's callbacks ---------------------------------------------------------

  static Connection& self(void* user) { return *static_cast<Connection*>(user); }

  static int on_begin(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      self(user).calls_[frame->hd.stream_id];
    }
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* n,
                       std::size_t nlen, const std::uint8_t* v, std::size_t vlen, std::uint8_t,
                       void* user) {
    auto it = self(user).calls_.find(frame->hd.stream_id);
    if (it == self(user).calls_.end()) return 0;
    Call& call = it->second;
    const std::string_view name(reinterpret_cast<const char*>(n), nlen);
    const std::string_view value(reinterpret_cast<const char*>(v), vlen);
    if (name == ":path") {
      call.path_ok = value == kMethodPath;
    } else if (name == "content-type") {
      call.grpc = is_grpc_content_type(value);
    } else if (name == "grpc-timeout") {
      call.timeout = parse_grpc_timeout(value);
    }
    return 0;
  }

  static int on_data(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
                     std::size_t len, void* user) {
    Connection& c = self(user);
    auto it = c.calls_.find(id);
    if (it == c.calls_.end() || it->second.too_big) return 0;
    Call& call = it->second;
    const std::size_t limit = c.max_message() + 5;
    if (call.body.size() + len > limit || c.buffered_ + len > kMaxBuffered) {
      // Answered now (the rest of the stream is read and dropped: a gRPC
      // client stops sending once it has the answer).
      call.too_big = true;
      c.buffered_ -= call.body.size();
      std::string().swap(call.body);
      c.fail(id, kResourceExhausted, "the message is too large");
      return 0;
    }
    call.body.append(reinterpret_cast<const char*>(data), len);
    c.buffered_ += len;
    return 0;
  }

  static int on_frame(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    const bool ended = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (ended && (frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS)) {
      // Nothing thrown may cross nghttp2's C frames (a failed allocation).
      try {
        self(user).dispatch(frame->hd.stream_id);
      } catch (const std::exception&) {
        self(user).fail(frame->hd.stream_id, kInternal, "internal error");
      }
    }
    return 0;
  }

  static int on_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* user) {
    Connection& c = self(user);
    auto it = c.calls_.find(id);
    if (it == c.calls_.end()) return 0;
    if (it->second.deadline) it->second.deadline->cancel();
    c.buffered_ -= it->second.body.size();
    c.calls_.erase(it);
    return 0;
  }

  static ssize_t read_out(nghttp2_session* session, std::int32_t id, std::uint8_t* buf,
                          std::size_t length, std::uint32_t* flags, nghttp2_data_source*,
                          void* user) {
    auto it = self(user).calls_.find(id);
    if (it == self(user).calls_.end()) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    Call& call = it->second;
    const std::size_t n = std::min(length, call.out.size() - call.sent);
    std::memcpy(buf, call.out.data() + call.sent, n);
    call.sent += n;
    if (call.sent == call.out.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const nghttp2_nv trailer[] = {nv("grpc-status", "0")};
      nghttp2_submit_trailer(session, id, trailer, std::size(trailer));
    }
    return static_cast<ssize_t>(n);
  }

  // ---- Calls -----------------------------------------------------------------------

  static nghttp2_nv nv(std::string_view name, std::string_view value) {
    return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
            reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
            value.size(), NGHTTP2_NV_FLAG_NO_COPY_NAME};
  }

  std::size_t max_message() const {
    auto worker = worker_.lock();
    const auto& rls = worker ? (*worker->config)->rls : nullptr;
    return rls ? rls->max_message_bytes : (1u << 20);
  }

  void dispatch(std::int32_t id) {
    auto it = calls_.find(id);
    if (it == calls_.end()) return;
    Call& call = it->second;
    if (!call.path_ok) return fail(id, kUnimplemented, "only ShouldRateLimit is served here");
    if (!call.grpc) return fail(id, kInvalidArgument, "not a gRPC call (content-type)");
    if (call.too_big) return;  // answered as it came
    if (call.body.size() < 5) return fail(id, kInvalidArgument, "no message");
    const auto* b = reinterpret_cast<const unsigned char*>(call.body.data());
    const std::size_t length = (std::size_t{b[1]} << 24) | (std::size_t{b[2]} << 16) |
                               (std::size_t{b[3]} << 8) | b[4];
    if (b[0] != 0) return fail(id, kUnimplemented, "compressed messages are not supported");
    if (length != call.body.size() - 5) return fail(id, kInvalidArgument, "not one message");
    auto worker = worker_.lock();
    if (!worker) return fail(id, kUnavailable, "the worker is stopping");
    last_call_ = std::chrono::steady_clock::now();
    if (call.timeout) {
      call.deadline = std::make_unique<asio::steady_timer>(stream_.socket().get_executor());
      call.deadline->expires_after(std::min(*call.timeout, kMaxDeadline));
      call.deadline->async_wait([weak = weak_from_this(), id](error_code ec) {
        if (auto self = weak.lock(); self && !ec) {
          self->fail(id, kDeadlineExceeded, "the deadline passed before the decision");
        }
      });
    }
    const std::string_view message = std::string_view(call.body).substr(5);
    decide_rls_call(*worker, message, [weak = weak_from_this(), id](RlsReply reply) {
      auto self = weak.lock();
      if (!self || self->closed_) return;
      if (reply.grpc_status != 0) return self->fail(id, reply.grpc_status, reply.grpc_message);
      self->answer(id, std::move(reply.message));
    });
  }

  Call* unanswered(std::int32_t id) {
    auto it = calls_.find(id);
    if (it == calls_.end() || it->second.answered) return nullptr;
    it->second.answered = true;
    if (it->second.deadline) it->second.deadline->cancel();
    buffered_ -= it->second.body.size();
    std::string().swap(it->second.body);
    return &it->second;
  }

  void answer(std::int32_t id, std::string message) {
    Call* call = unanswered(id);
    if (!call || closed_) return;
    call->out.resize(5);
    const auto n = static_cast<std::uint32_t>(message.size());
    call->out[0] = 0;
    for (int i = 0; i < 4; ++i) call->out[1 + i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
    call->out += message;
    const nghttp2_nv head[] = {nv(":status", "200"), nv("content-type", "application/grpc")};
    nghttp2_data_provider provider{};
    provider.read_callback = &Connection::read_out;
    nghttp2_submit_response(session_, id, head, std::size(head), &provider);
    flush();
  }

  void fail(std::int32_t id, unsigned status, std::string_view message) {
    if (!unanswered(id) || closed_) return;
    const std::string code = std::to_string(status);
    const std::string text = grpc_percent_encode(message);
    const nghttp2_nv head[] = {nv(":status", "200"), nv("content-type", "application/grpc"),
                               nv("grpc-status", code), nv("grpc-message", text)};
    nghttp2_submit_response(session_, id, head, std::size(head), nullptr);
    flush();
  }

  ByteStream stream_;
  std::shared_ptr<const ServerTls> tls_;
  std::weak_ptr<BucketWorker> worker_;
  std::chrono::milliseconds idle_;
  asio::steady_timer timer_;
  nghttp2_session* session_ = nullptr;
  std::map<std::int32_t, Call> calls_;
  std::size_t buffered_ = 0;
  std::array<char, 16384> in_{};
  std::string out_;
  bool writing_ = false;
  bool closed_ = false;
  bool draining_ = false;
  bool receiving_ = false;  // within nghttp2_session_mem_recv (its callbacks)
  std::chrono::steady_clock::time_point last_call_ = std::chrono::steady_clock::now();
};

}  // namespace

void serve_rls_connection(WorkerSocket socket, std::shared_ptr<const ServerTls> tls,
                          std::weak_ptr<BucketWorker> weak) {
  auto worker = weak.lock();
  const auto config = worker ? *worker->config : nullptr;
  if (!config || !config->rls || open_connections >= config->rls->max_connections) {
    error_code ignored;
    socket.close(ignored);  // over rls.max_connections (or stopping): refused
    return;
  }
  std::make_shared<Connection>(std::move(socket), std::move(tls), std::move(weak),
                               config->server.idle_timeout)
      ->start();
}

void drain_rls_connections() {
  for (auto& weak : worker_connections) {
    if (auto connection = weak.lock()) connection->drain();
  }
}

}  // namespace sluice
