#include "gateway/listener.hpp"

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "gateway/worker.hpp"
#include "upstream/connection_budget.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Descriptors kept out of the data plane's reach (the fixed part of the
// reserve: the admin listener's connections, Redis, log files, listeners).
constexpr std::size_t kReservedDescriptors = ConnectionBudget::kReserved;
// Above this share of the cap, every accept closes one idle keep-alive connection.
constexpr double kShedIdleAbove = 0.9;

// What a client refused at the connection cap reads before the close.
const std::string& overloaded_reply() {
  static const std::string reply = [] {
    const std::string body = "{\"error\":\"too many connections\"}\n";
    return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
           "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  return reply;
}

// Connections taken per readiness of the listening socket before it is
// waited on again (the main thread has other listeners and timers).
constexpr int kAcceptBatch = 32;

// An accepted descriptor on its way to a worker: closed unless it got there.
class OwnedFd {
 public:
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&&) = delete;
  ~OwnedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Raises the soft descriptor limit to the hard one and returns the soft limit now in force.
std::size_t raise_descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? static_cast<std::size_t>(1) << 20
                                         : static_cast<std::size_t>(limit.rlim_cur);
}

}  // namespace

Listener::Listener(asio::io_context& io, const std::vector<std::unique_ptr<Worker>>& workers,
                   MetricsShard& metrics, std::string_view name, Serve serve)
    : workers_(workers),
      metrics_(metrics),
      serve_(std::move(serve)),
      acceptor_(io),
      backoff_(io, name) {}

bool Listener::bind(const HostPort& where, const char* key) {
  return bind_acceptor(acceptor_, where, key);
}

std::size_t Listener::limit_connections(std::size_t configured) {
  // Each proxied client connection may hold an upstream connection too.
  const std::size_t descriptors = raise_descriptor_limit();
  const std::size_t fitting =
      descriptors > 2 * kReservedDescriptors ? (descriptors - kReservedDescriptors) / 2 : 1;
  max_connections_ = std::min(configured, fitting);
  if (max_connections_ < configured) {
    spdlog::warn(
        "server.max_connections {} lowered to {} to fit the descriptor limit {} (raise it with "
        "ulimit -n or LimitNOFILE)",
        configured, max_connections_, descriptors);
  }
  descriptors_ = descriptors;
  return max_connections_;
}

void Listener::start() {
  boost::system::error_code ec;
  protocol_ = acceptor_.local_endpoint(ec).protocol();
  acceptor_.native_non_blocking(true, ec);  // accept4 below must not block
  do_accept();
}

void Listener::close() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  backoff_.cancel();
}

// The listening socket is waited on here, and its connections are taken with
// accept4 as plain descriptors. One refused at the cap is answered and closed
// here without ever being a worker's (nothing of it reaches a worker's
// reactor). One admitted is registered with its worker's reactor here (its
// bookkeeping then comes from this thread's heap, away from the sessions',
// which lets the memory of a closed wave go back) and handed over by a post.
void Listener::do_accept() {
  acceptor_.async_wait(tcp::acceptor::wait_read,
                       [this](boost::system::error_code ec) { on_readable(ec); });
}

void Listener::on_readable(boost::system::error_code ec) {
  if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
  if (ec) return backoff_.failed(ec, metrics_, [this] { do_accept(); });
  for (int taken = 0; taken < kAcceptBatch; ++taken) {
    const int fd = ::accept4(acceptor_.native_handle(), nullptr, nullptr,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      backoff_.succeeded();
      hand_over(fd);
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) break;
    // A connection reset before it was taken, or a signal: the next one.
    if (error == ECONNABORTED || error == EINTR || error == EPROTO) continue;
    // Out of descriptors or memory: wait, then try again.
    return backoff_.failed(boost::system::error_code(error, boost::system::system_category()),
                           metrics_, [this] { do_accept(); });
  }
  do_accept();
}

void Listener::hand_over(int accepted) {
  OwnedFd fd{accepted};
  if (!admit_connection()) {
    // At the cap with nothing idle to close: a short answer (in plain HTTP
    // only: a TLS client could not read it), then the close.
    if (!tls_) {
      const std::string& reply = overloaded_reply();
      [[maybe_unused]] const ssize_t sent =
          ::send(fd.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
    }
    ::shutdown(fd.get(), SHUT_RDWR);
    metrics_.add("sluice_connections_rejected_total", "");
    note_refusal();
    return;  // closed by OwnedFd
  }
  Worker& worker = *workers_[next_worker_];
  next_worker_ = (next_worker_ + 1) % workers_.size();
  WorkerSocket socket(worker.io());
  boost::system::error_code ec;
  socket.assign(protocol_, fd.get(), ec);
  if (ec) {
    spdlog::warn("accepted connection not served: {}", ec.message());
    return;  // closed by OwnedFd
  }
  fd.release();  // the socket's now
  asio::post(worker.io(), [serve = serve_, &worker, socket = std::move(socket),
                           tls = tls_]() mutable { serve(worker, std::move(socket), std::move(tls)); });
}

// Logged at most every kLogEvery: the descriptors behind the cap are kept.
void Listener::note_refusal() {
  ++unreported_refusals_;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_refusal_log_) return;
  spdlog::warn(
      "connection cap {} reached: {} new connection(s) refused since the last report (the "
      "descriptors beyond it stay with upstream connections, Redis and the admin listener)",
      max_connections_, unreported_refusals_);
  unreported_refusals_ = 0;
  next_refusal_log_ = now + kRefusalLogEvery;
}

// Near the cap, the longest idle keep-alive connection of the worker with the
// most idle ones is closed for each new connection; at the cap a new
// connection is taken only when such a connection can make room for it.
bool Listener::admit_connection() {
  std::size_t total = 0;
  std::size_t idle = 0;
  Worker* most_idle = nullptr;
  for (const auto& w : workers_) {
    total += w->session_count();
    const std::size_t n = w->idle_count();
    idle += n;
    if (n > 0 && (!most_idle || n > most_idle->idle_count())) most_idle = w.get();
  }
  const auto high_water = static_cast<std::size_t>(kShedIdleAbove * max_connections_);
  if (total >= high_water && most_idle) {
    asio::post(most_idle->io(), [most_idle] { most_idle->shed_idle(1); });
  }
  return total < max_connections_ || idle > 0;
}

}  // namespace sluice
