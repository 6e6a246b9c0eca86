#include "gateway/listener.hpp"

#include <sys/resource.h>

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
                   MetricsShard& metrics, std::string_view name)
    : workers_(workers), metrics_(metrics), acceptor_(io), backoff_(io, name) {}

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
  do_accept();
}

void Listener::close() {
  boost::system::error_code ec;
  acceptor_.close(ec);
  backoff_.cancel();
}

void Listener::do_accept() {
  Worker& worker = *workers_[next_worker_];
  next_worker_ = (next_worker_ + 1) % workers_.size();
  acceptor_.async_accept(worker.io(),
                         [this, &worker](boost::system::error_code ec, WorkerSocket socket) {
                           on_accept(worker, ec, std::move(socket));
                         });
}

void Listener::on_accept(Worker& worker, boost::system::error_code ec, WorkerSocket socket) {
  if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
  if (ec) return backoff_.failed(ec, metrics_, [this] { do_accept(); });
  backoff_.succeeded();
  if (!admit_connection()) {
    // At the cap with nothing idle to close: a short answer (in plain HTTP
    // only: a TLS client could not read it), then the close.
    boost::system::error_code ignored;
    socket.non_blocking(true, ignored);
    if (!tls_) socket.send(asio::buffer(overloaded_reply()), 0, ignored);
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    metrics_.add("sluice_connections_rejected_total", "");
    note_refusal();
  } else {
    asio::post(worker.io(), [&worker, socket = std::move(socket), tls = tls_]() mutable {
      start_client_session(worker, std::move(socket), std::move(tls));
    });
  }
  do_accept();
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
