#include "gateway/application.hpp"
#include "gateway/config/load.hpp"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "gateway/process_metrics.hpp"
#include "gateway/session.hpp"
#include "gateway/version.hpp"
#include "gateway/worker.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr auto kAdminTimeout = std::chrono::seconds(30);
// Descriptors kept out of the data plane's reach: the admin listener's
// connections, Redis, log files, listeners.
constexpr std::size_t kReservedDescriptors = 128;
// At most this many admin connections at once; more are closed at accept.
constexpr std::size_t kMaxAdminConnections = 64;
// Above this share of the cap, every accept closes one idle keep-alive connection.
constexpr double kShedIdleAbove = 0.9;
constexpr auto kAcceptBackoffMin = std::chrono::milliseconds(10);
constexpr auto kAcceptBackoffMax = std::chrono::milliseconds(1000);
constexpr auto kAcceptErrorLogEvery = std::chrono::seconds(5);
// Memory freed by many closed connections is handed back to the system when
// the connection count has fallen this far below its recent peak.
constexpr auto kTrimCheckEvery = std::chrono::seconds(2);
constexpr std::size_t kTrimAfterClosing = 256;
constexpr std::size_t kTrimAfterFreedRelayBuffers = 256;  // 16 MiB

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

// A listener whose accept fails (out of descriptors and the like) backs off,
// doubling from kAcceptBackoffMin to kAcceptBackoffMax, instead of spinning,
// counts every failure and logs at most once per kAcceptErrorLogEvery.
class AcceptBackoff {
 public:
  AcceptBackoff(asio::io_context& io, std::string_view listener)
      : timer_(io), listener_(listener) {}

  template <class Retry>
  void failed(const beast::error_code& ec, MetricsShard& metrics, Retry retry) {
    metrics.add("sluice_accept_errors_total", label("listener", listener_));
    ++unreported_;
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_report_) {
      spdlog::warn("{} listener: accept failed: {} ({} time(s) since the last report); backing off",
                   listener_, ec.message(), unreported_);
      unreported_ = 0;
      next_report_ = now + kAcceptErrorLogEvery;
    }
    timer_.expires_after(delay_);
    delay_ = std::min(delay_ * 2, kAcceptBackoffMax);
    timer_.async_wait([retry = std::move(retry)](beast::error_code e) {
      if (!e) retry();
    });
  }
  void succeeded() { delay_ = kAcceptBackoffMin; }
  void cancel() { timer_.cancel(); }

 private:
  asio::steady_timer timer_;
  std::string_view listener_;
  std::chrono::milliseconds delay_{kAcceptBackoffMin};
  std::size_t unreported_ = 0;
  std::chrono::steady_clock::time_point next_report_{};
};

tcp::endpoint endpoint_of(const HostPort& hp) {
  return {asio::ip::make_address(hp.host), hp.port};
}

}  // namespace

class Application::Impl {
 public:
  Impl(std::string path, std::shared_ptr<const Config> config, ApplicationHooks hooks)
      : path_(std::move(path)), config_(std::move(config)), hooks_(std::move(hooks)) {}

  bool start();
  int run();
  void request_stop() {
    asio::post(main_io_, [this] { begin_shutdown(); });
  }

  tcp::acceptor& acceptor() { return acceptor_; }
  tcp::acceptor& admin_acceptor() { return admin_acceptor_; }

  void handle_admin(const http::request<http::string_body>& req,
                    std::function<void(http::response<http::string_body>)> reply);

  std::atomic<std::size_t> admin_connections{0};

 private:
  bool bind(tcp::acceptor& acceptor, const HostPort& where, const char* what);
  void do_accept();
  void on_accept(Worker& worker, beast::error_code ec, WorkerSocket socket);
  bool admit_connection(Worker& worker);
  void do_admin_accept();
  void trim_memory_later();
  void wait_signal();
  void reload();
  void begin_shutdown();
  void wait_drained(std::chrono::steady_clock::time_point deadline);
  void finish_shutdown();
  void scrape(std::function<void(std::string)> done);
  void seed_metrics();

  std::string path_;
  std::shared_ptr<const Config> config_;
  ApplicationHooks hooks_;
  asio::io_context main_io_{1};
  tcp::acceptor acceptor_{main_io_};
  tcp::acceptor admin_acceptor_{main_io_};
  asio::signal_set signals_{main_io_, SIGINT, SIGTERM, SIGHUP};
  asio::steady_timer drain_timer_{main_io_};
  AcceptBackoff accept_backoff_{main_io_, "server"};
  AcceptBackoff admin_backoff_{main_io_, "admin"};
  std::size_t max_connections_ = 0;  // the cap in force
  asio::steady_timer trim_timer_{main_io_};
  std::size_t peak_connections_ = 0;  // since the last trim
  std::size_t freed_relay_buffers_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::size_t next_worker_ = 0;
  MetricsShard main_metrics_;  // main-thread metrics (reloads)
  // Zero series of the running config, rebuilt on reload (so a removed route's
  // series that never moved go away); merged under the others at scrape time.
  MetricsShard seed_metrics_;
  bool stopping_ = false;
  bool ready_ = false;
};

// ---- Admin listener -------------------------------------------------------

namespace {

class AdminSession : public std::enable_shared_from_this<AdminSession> {
 public:
  AdminSession(Application::Impl& app, tcp::socket socket)
      : app_(app), stream_(std::move(socket)) {
    ++app_.admin_connections;
  }
  ~AdminSession() { --app_.admin_connections; }

  void start() { do_read(); }

 private:
  void do_read() {
    req_ = {};
    parser_.emplace();
    parser_->header_limit(8192);
    parser_->body_limit(8192);
    stream_.expires_after(kAdminTimeout);
    http::async_read(
        stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) return self->close();
          self->req_ = self->parser_->release();
          self->app_.handle_admin(self->req_, [self](http::response<http::string_body> res) {
            self->write(std::move(res));
          });
        });
  }

  void write(http::response<http::string_body> res) {
    res_ = std::move(res);
    res_.keep_alive(req_.keep_alive());
    res_.prepare_payload();
    if (req_.method() == http::verb::head) {
      // The head of what GET would send, without the body.
      const auto length = res_.body().size();
      res_.body().clear();
      res_.content_length(length);
    }
    stream_.expires_after(kAdminTimeout);
    http::async_write(stream_, res_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec || !self->res_.keep_alive()) return self->close();
                        self->do_read();
                      });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  Application::Impl& app_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> req_;
  http::response<http::string_body> res_;
};

http::response<http::string_body> text_response(http::status status, std::string content_type,
                                                std::string body) {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::server, "sluice");
  res.set(http::field::content_type, content_type);
  res.set(http::field::cache_control, "no-store");
  res.body() = std::move(body);
  return res;
}

}  // namespace

void Application::Impl::handle_admin(const http::request<http::string_body>& req,
                                     std::function<void(http::response<http::string_body>)> reply) {
  const auto target = std::string_view{req.target()}.substr(0, req.target().find('?'));
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    auto res = text_response(http::status::method_not_allowed, "application/json",
                             "{\"error\":\"method not allowed\"}\n");
    res.set(http::field::allow, "GET, HEAD");
    return reply(std::move(res));
  }
  if (target == "/healthz") {
    return reply(text_response(http::status::ok, "application/json", "{\"status\":\"ok\"}\n"));
  }
  if (target == "/readyz") {
    const std::string deps = hooks_.readiness ? hooks_.readiness() : "{}";
    const bool ready = ready_ && !stopping_;
    const std::string body = std::string{"{\"status\":\""} + (ready ? "ready" : "not ready") +
                             "\",\"dependencies\":" + deps + "}\n";
    return reply(text_response(ready ? http::status::ok : http::status::service_unavailable,
                               "application/json", body));
  }
  if (target == "/metrics") {
    return scrape([reply = std::move(reply)](std::string text) {
      reply(text_response(http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                          std::move(text)));
    });
  }
  reply(text_response(http::status::not_found, "application/json", "{\"error\":\"not found\"}\n"));
}

// Every worker copies its shard on its own thread; the copies are merged on
// the main thread once all have arrived.
void Application::Impl::scrape(std::function<void(std::string)> done) {
  struct Gather {
    std::vector<MetricsShard> shards;
    std::size_t pending = 0;
    std::function<void(std::string)> done;
  };
  auto gather = std::make_shared<Gather>();
  gather->shards.resize(workers_.size());
  gather->pending = workers_.size();
  gather->done = std::move(done);
  auto finish = [this, gather] {
    MetricsSnapshot snapshot;
    seed_metrics_.merge_into(snapshot);
    main_metrics_.merge_into(snapshot);
    for (const auto& shard : gather->shards) shard.merge_into(snapshot);
    // Every route gets a series for every status code that any route has answered.
    std::vector<std::string> routes;
    for (const auto& route : config_->routes) routes.push_back(route.name);
    snapshot.cross_fill("sluice_http_requests_total", "route", routes);
    gather->done(snapshot.render() + render_process_metrics(read_process_stats()));
  };
  if (workers_.empty()) return finish();
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    Worker& worker = *workers_[i];
    asio::post(worker.io(), [this, &worker, gather, i, finish] {
      if (hooks_.before_scrape) hooks_.before_scrape(worker);
      MetricsShard copy = worker.metrics();
      asio::post(main_io_, [gather, i, copy = std::move(copy), finish]() mutable {
        gather->shards[i] = std::move(copy);
        if (--gather->pending == 0) finish();
      });
    });
  }
}

void Application::Impl::seed_metrics() {
  MetricsShard seeds;
  for (const auto result : {"ok", "error"}) {
    seeds.declare("sluice_config_reloads_total", label("result", result));
  }
  seed_session_metrics(*config_, seeds);
  if (hooks_.seed_metrics) hooks_.seed_metrics(*config_, seeds);
  seed_metrics_ = std::move(seeds);
}

// ---- Lifecycle --------------------------------------------------------------

bool Application::Impl::bind(tcp::acceptor& acceptor, const HostPort& where, const char* what) {
  beast::error_code ec;
  tcp::endpoint endpoint;
  try {
    endpoint = endpoint_of(where);
  } catch (const std::exception& e) {
    spdlog::error("{} {}: bad address: {}", what, where.to_string(), e.what());
    return false;
  }
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    spdlog::error("cannot listen on {} ({}): {}", where.to_string(), what, ec.message());
    return false;
  }
  return true;
}

bool Application::Impl::start() {
  if (!bind(acceptor_, config_->server.listen, "server.listen")) return false;
  if (!bind(admin_acceptor_, config_->admin.listen, "admin.listen")) return false;

  // Each proxied client connection may hold an upstream connection too.
  const std::size_t descriptors = raise_descriptor_limit();
  const std::size_t fitting =
      descriptors > 2 * kReservedDescriptors ? (descriptors - kReservedDescriptors) / 2 : 1;
  max_connections_ = std::min(config_->server.max_connections, fitting);
  if (max_connections_ < config_->server.max_connections) {
    spdlog::warn(
        "server.max_connections {} lowered to {} to fit the descriptor limit {} (raise it with "
        "ulimit -n or LimitNOFILE)",
        config_->server.max_connections, max_connections_, descriptors);
  }
  main_metrics_.set("sluice_connections_max", "", static_cast<double>(max_connections_));
  main_metrics_.add("sluice_connections_rejected_total", "", 0);
  main_metrics_.add("sluice_accept_errors_total", label("listener", "server"), 0);
  main_metrics_.add("sluice_accept_errors_total", label("listener", "admin"), 0);
  main_metrics_.set("sluice_build_info", label("version", version()), 1);
  seed_metrics();

  unsigned threads = config_->server.threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; ++i) {
    workers_.push_back(std::make_unique<Worker>(i, config_));
  }
  for (auto& w : workers_) {
    Worker& worker = *w;
    if (hooks_.make_chain) {
      asio::post(worker.io(), [this, &worker] { worker.chain() = hooks_.make_chain(worker); });
    }
    worker.start();
  }
  do_accept();
  do_admin_accept();
  trim_memory_later();
  wait_signal();
  ready_ = true;
  spdlog::info("sluice listening on {} (data plane, {} worker threads), admin on {}",
               acceptor_.local_endpoint().address().to_string() + ":" +
                   std::to_string(acceptor_.local_endpoint().port()),
               threads,
               admin_acceptor_.local_endpoint().address().to_string() + ":" +
                   std::to_string(admin_acceptor_.local_endpoint().port()));
  return true;
}

void Application::Impl::do_accept() {
  Worker& worker = *workers_[next_worker_];
  next_worker_ = (next_worker_ + 1) % workers_.size();
  acceptor_.async_accept(worker.io(), [this, &worker](beast::error_code ec, WorkerSocket socket) {
    on_accept(worker, ec, std::move(socket));
  });
}

void Application::Impl::on_accept(Worker& worker, beast::error_code ec, WorkerSocket socket) {
  if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
  if (ec) return accept_backoff_.failed(ec, main_metrics_, [this] { do_accept(); });
  accept_backoff_.succeeded();
  if (!admit_connection(worker)) {
    // At the cap with nothing idle to close: a short answer, then the close.
    beast::error_code ignored;
    socket.non_blocking(true, ignored);
    socket.send(asio::buffer(overloaded_reply()), 0, ignored);
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    main_metrics_.add("sluice_connections_rejected_total", "");
  } else {
    asio::post(worker.io(), [&worker, socket = std::move(socket)]() mutable {
      start_client_session(worker, std::move(socket));
    });
  }
  do_accept();
}

// Near the cap, the longest idle keep-alive connection of the worker with the
// most idle ones is closed for each new connection; at the cap a new
// connection is taken only when such a connection can make room for it.
bool Application::Impl::admit_connection(Worker&) {
  std::size_t total = 0;
  std::size_t idle = 0;
  Worker* most_idle = nullptr;
  for (auto& w : workers_) {
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

void Application::Impl::do_admin_accept() {
  admin_acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !admin_acceptor_.is_open()) return;
    if (ec) return admin_backoff_.failed(ec, main_metrics_, [this] { do_admin_accept(); });
    admin_backoff_.succeeded();
    if (admin_connections.load() >= kMaxAdminConnections) {
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<AdminSession>(*this, std::move(socket))->start();
    }
    do_admin_accept();
  });
}

// glibc keeps the heap pages of freed per-connection memory; after a large
// wave of connections has closed, malloc_trim gives them back.
void Application::Impl::trim_memory_later() {
  trim_timer_.expires_after(kTrimCheckEvery);
  trim_timer_.async_wait([this](beast::error_code ec) {
    if (ec || stopping_) return;
    std::size_t now = 0;
    std::size_t peak = 0;
    for (auto& w : workers_) {
      now += w->session_count();
      peak += w->take_peak_session_count();
      freed_relay_buffers_ += w->take_freed_relay_buffers();
    }
    peak_connections_ = std::max(peak_connections_, peak);
    if (peak_connections_ >= now + kTrimAfterClosing ||
        freed_relay_buffers_ >= kTrimAfterFreedRelayBuffers) {
      freed_relay_buffers_ = 0;
      malloc_trim(0);
      peak_connections_ = now;
    }
    trim_memory_later();
  });
}

void Application::Impl::wait_signal() {
  signals_.async_wait([this](beast::error_code ec, int signo) {
    if (ec) return;
    if (signo == SIGHUP) {
      reload();
      return wait_signal();
    }
    spdlog::info("received signal {}, draining", signo);
    begin_shutdown();
  });
}

void Application::Impl::reload() {
  auto result = load_config_file(path_);
  if (!result.config) {
    spdlog::error("reload of {} failed; keeping the running configuration", path_);
    for (const auto& e : result.errors) spdlog::error("{}", e);
    main_metrics_.add("sluice_config_reloads_total", label("result", "error"));
    return;
  }
  const auto& next = *result.config;
  if (next.server.listen.to_string() != config_->server.listen.to_string() ||
      next.admin.listen.to_string() != config_->admin.listen.to_string()) {
    spdlog::warn("reload: listen addresses changed; the new addresses take effect on restart");
  }
  if (next.server.threads != config_->server.threads) {
    spdlog::warn("reload: server.threads changed; takes effect on restart");
  }
  if (next.server.max_connections != config_->server.max_connections) {
    spdlog::warn("reload: server.max_connections changed; takes effect on restart");
  }
  for (const auto& w : result.warnings) spdlog::warn("{}", w);
  config_ = result.config;
  if (!hooks_.log_level_from_command_line) {
    spdlog::set_level(spdlog::level::from_str(config_->log.level));
  }
  for (auto& w : workers_) {
    Worker& worker = *w;
    asio::post(worker.io(), [this, &worker, config = config_] {
      worker.set_config(config);
      if (hooks_.on_config) hooks_.on_config(worker, config);
    });
  }
  seed_metrics();
  main_metrics_.add("sluice_config_reloads_total", label("result", "ok"));
  spdlog::info("configuration reloaded from {}", path_);
}

void Application::Impl::begin_shutdown() {
  if (stopping_) return;
  stopping_ = true;
  beast::error_code ec;
  acceptor_.close(ec);
  accept_backoff_.cancel();
  trim_timer_.cancel();
  for (auto& w : workers_) {
    Worker& worker = *w;
    asio::post(worker.io(), [&worker] { worker.begin_drain(); });
  }
  wait_drained(std::chrono::steady_clock::now() + config_->server.drain_timeout);
}

void Application::Impl::wait_drained(std::chrono::steady_clock::time_point deadline) {
  std::size_t active = 0;
  for (auto& w : workers_) active += w->session_count();
  if (active == 0 || std::chrono::steady_clock::now() >= deadline) {
    if (active) spdlog::warn("drain timeout: closing {} connections", active);
    return finish_shutdown();
  }
  drain_timer_.expires_after(std::chrono::milliseconds(20));
  drain_timer_.async_wait([this, deadline](beast::error_code ec) {
    if (!ec) wait_drained(deadline);
  });
}

void Application::Impl::finish_shutdown() {
  for (auto& w : workers_) {
    Worker& worker = *w;
    asio::post(worker.io(), [this, &worker] {
      worker.close_all();
      if (hooks_.on_stop) hooks_.on_stop(worker);
      worker.chain().clear();
      worker.release();
    });
  }
  // Workers end when their last handler has run; one that still has work
  // after a short grace period is stopped.
  const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (auto& w : workers_) {
    while (!w->finished() && std::chrono::steady_clock::now() < grace) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!w->finished()) w->halt();
    w->join();
  }
  beast::error_code ec;
  admin_acceptor_.close(ec);
  admin_backoff_.cancel();
  signals_.cancel();
  main_io_.stop();
}

int Application::Impl::run() {
  main_io_.run();
  // Accepts aborted at shutdown still hold sockets of the workers' contexts:
  // run them now, while the workers exist.
  main_io_.restart();
  main_io_.poll();
  spdlog::info("sluice stopped");
  return 0;
}

Application::Application(std::string config_path, std::shared_ptr<const Config> config,
                         ApplicationHooks hooks)
    : impl_(std::make_unique<Impl>(std::move(config_path), std::move(config), std::move(hooks))) {}

Application::~Application() = default;

bool Application::start() {
  return impl_->start();
}
int Application::run() {
  return impl_->run();
}
void Application::request_stop() {
  impl_->request_stop();
}
std::uint16_t Application::listen_port() const {
  return impl_->acceptor().local_endpoint().port();
}
std::uint16_t Application::admin_port() const {
  return impl_->admin_acceptor().local_endpoint().port();
}

}  // namespace sluice
