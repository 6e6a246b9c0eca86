#include "gateway/application.hpp"
#include "gateway/application_impl.hpp"
#include "gateway/config/load.hpp"

#include <algorithm>
#include <csignal>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/admin/admin_access.hpp"
#include "gateway/admin/admin_server.hpp"
#include "gateway/health_checks.hpp"
#include "gateway/listener.hpp"
#include "gateway/memory_trim.hpp"
#include "gateway/metrics_scrape.hpp"
#include "gateway/readiness.hpp"
#include "gateway/service_notify.hpp"
#include "gateway/tls/server_tls.hpp"
#include "gateway/version.hpp"
#include "gateway/worker.hpp"
#include "gateway/worker_services.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using error_code = boost::system::error_code;

std::string to_string(const asio::ip::tcp::endpoint& endpoint) {
  return endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

}  // namespace

// How long a start waits for the services' dependencies (Redis) before it
// tells a service manager it is ready anyway: the routes' failure modes
// decide what clients get meanwhile, and a Redis that is down must not fail
// the start of a gateway that can serve without it.
constexpr auto kReadyWaitLimit = std::chrono::seconds(10);
// What a service manager is told while all is well.
constexpr std::string_view kReadyServing = "READY=1\nSTATUS=serving";

// server.listen speaks TLS when server.tls has no listen of its own;
// otherwise it stays plain and server.tls.listen serves TLS beside it.
// Where `config` serves TLS: "" (nowhere), "server.listen", or the address of
// server.tls.listen.
static std::string tls_place(const Config& config) {
  const auto& tls = config.server.tls;
  if (!tls) return "";
  return tls->listen ? tls->listen->to_string() : "server.listen";
}

bool Application::Impl::bind_listeners() {
  if (!listener_.bind(config_->server.listen, "server.listen")) return false;
  const auto& tls = config_->server.tls;
  if (!tls) return true;
  tls_place_ = tls_place(*config_);
  if (!tls->listen) {
    listener_.set_tls(tls->contexts);
    return true;
  }
  if (!tls_listener_.bind(*tls->listen, "server.tls.listen")) return false;
  tls_listener_.set_tls(tls->contexts);
  main_metrics_.add("sluice_accept_errors_total", label("listener", "tls"), 0);
  return true;
}

// New certificates go to new connections; open ones keep theirs, and tickets
// issued before the reload still resume (the ticket keys carry over). Whether and
// where TLS is served is what the process started with: a configuration that
// moves it gets a warning, and the running listener keeps its certificates.
void Application::Impl::reload_tls(const Config& next) {
  const auto& then = next.server.tls;
  if (tls_place(next) != tls_place_) {
    spdlog::warn("reload: server.tls added, removed or moved; takes effect on restart");
    return;
  }
  if (!then) return;
  Listener& serving = then->listen ? tls_listener_ : listener_;
  if (serving.tls()) then->contexts->keep_ticket_keys(*serving.tls());
  serving.set_tls(then->contexts);
}

bool Application::Impl::start() {
  if (!bind_listeners()) return false;
  if (!admin_server_.bind(config_->admin.listen)) return false;
  set_admin_access();
  const std::size_t max_connections = listener_.limit_connections(config_->server.max_connections);
  tls_listener_.set_connection_cap(max_connections);
  for (const ServiceListener& spec : options_.listeners) {
    const auto where = spec.where(*config_);
    if (!where) continue;
    auto listener = std::make_unique<Listener>(main_io_, workers_, main_metrics_, spec.name,
                                               spec.serve);
    if (!listener->bind(*where, spec.key.c_str())) return false;
    listener->set_tls(spec.tls ? spec.tls(*config_) : nullptr);
    listener->set_connection_cap(max_connections);
    main_metrics_.add("sluice_accept_errors_total", label("listener", spec.name), 0);
    service_listeners_.push_back({&spec, std::move(listener), where->to_string()});
  }
  main_metrics_.set("sluice_connections_max", "", static_cast<double>(max_connections));
  main_metrics_.add("sluice_connections_rejected_total", "", 0);
  main_metrics_.add("sluice_accept_errors_total", label("listener", "server"), 0);
  main_metrics_.add("sluice_accept_errors_total", label("listener", "admin"), 0);
  main_metrics_.add("sluice_admin_connections_shed_total", "", 0);
  main_metrics_.set("sluice_build_info", label("version", version()), 1);
  seed_metrics_ = seed_series(*config_, options_.services.get());
  if (options_.services) options_.services->on_config_loaded(*config_);

  start_workers();
  follow_health_checks();
  listener_.start();
  if (tls_listener_.is_bound()) tls_listener_.start();
  for (auto& [spec, listener, address] : service_listeners_) {
    listener->start();
    spdlog::info("{} listening on {}{}", spec->key, to_string(listener->local_endpoint()),
                 listener->tls() ? " (TLS)" : "");
  }
  admin_server_.start();
  memory_trim_.start();
  wait_signal();
  ready_ = true;
  announce_ready(std::chrono::steady_clock::now() + kReadyWaitLimit);
  const bool tls_beside = tls_listener_.is_bound();
  spdlog::info("sluice listening on {}{}{} (data plane, {} worker threads), admin on {}",
               to_string(listener_.local_endpoint()),
               config_->server.tls && !tls_beside ? " (TLS)" : "",
               tls_beside ? " and " + to_string(tls_listener_.local_endpoint()) + " (TLS)" : "",
               workers_.size(), to_string(admin_server_.local_endpoint()));
  return true;
}

// The checkers follow config_; each worker gets the health flags before the
// configuration they belong to, which is posted after them.
void Application::Impl::follow_health_checks() {
  auto health = health_checks_.apply(*config_);
  for (auto& w : workers_) {
    Worker& worker = *w;
    asio::post(worker.io(), [&worker, health] { worker.pools().set_health(health); });
  }
}

// Each worker builds its services on its own thread before anything else runs there.
void Application::Impl::start_workers() {
  unsigned threads = config_->server.threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  // Upstream connections get what the client cap and the reserve leave.
  connection_budget().set_limit(
      ConnectionBudget::upstream_share(listener_.descriptors(), listener_.connection_cap(), threads),
      threads);
  for (unsigned i = 0; i < threads; ++i) {
    workers_.push_back(std::make_unique<Worker>(i, config_));
  }
  for (auto& w : workers_) {
    Worker& worker = *w;
    if (auto* factory = options_.services.get()) {
      asio::post(worker.io(), [&worker, factory] { worker.start_services(*factory); });
    }
    worker.start();
  }
}

void Application::Impl::wait_signal() {
  signals_.async_wait([this](error_code ec, int signo) {
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
  notifier_.notify("RELOADING=1");
  auto result = load_config_file(path_);
  if (!result.config) {
    spdlog::error("reload of {} failed; keeping the running configuration", path_);
    for (const auto& e : result.errors) spdlog::error("{}", e);
    main_metrics_.add("sluice_config_reloads_total", label("result", "error"));
    notifier_.notify("READY=1\nSTATUS=serving; the last reload failed (see the log)");
    return;
  }
  const auto& next = *result.config;
  if (next.server.listen.to_string() != config_->server.listen.to_string() ||
      next.admin.listen.to_string() != config_->admin.listen.to_string()) {
    spdlog::warn("reload: listen addresses changed; the new addresses take effect on restart");
  }
  reload_tls(next);
  reload_service_listeners(next);
  if (next.server.threads != config_->server.threads) {
    spdlog::warn("reload: server.threads changed; takes effect on restart");
  }
  if (next.server.max_connections != config_->server.max_connections) {
    spdlog::warn("reload: server.max_connections changed; takes effect on restart");
  }
  for (const auto& w : result.warnings) spdlog::warn("{}", w);
  if (options_.services) options_.services->on_config_loaded(*result.config);
  config_ = result.config;
  set_admin_access();
  follow_health_checks();
  if (!options_.log_level_from_command_line) {
    spdlog::set_level(spdlog::level::from_str(config_->log.level));
  }
  for (auto& w : workers_) {
    Worker& worker = *w;
    asio::post(worker.io(), [&worker, config = config_] { worker.set_config(config); });
  }
  seed_metrics_ = seed_series(*config_, options_.services.get());
  main_metrics_.add("sluice_config_reloads_total", label("result", "ok"));
  spdlog::info("configuration reloaded from {}", path_);
  notifier_.notify(kReadyServing);
}

// A service listener keeps its address, and whether it speaks TLS, until a
// restart; its certificates follow the reload.
void Application::Impl::reload_service_listeners(const Config& next) {
  for (const ServiceListener& spec : options_.listeners) {
    const auto bound = std::find_if(service_listeners_.begin(), service_listeners_.end(),
                                    [&](const BoundService& b) { return b.spec == &spec; });
    const auto where = spec.where(next);
    if (bound == service_listeners_.end()) {
      if (where) spdlog::warn("reload: {} added; takes effect on restart", spec.key);
      continue;
    }
    if (!where || where->to_string() != bound->address) {
      spdlog::warn("reload: {} changed or removed; takes effect on restart", spec.key);
    }
    auto tls = spec.tls ? spec.tls(next) : nullptr;
    Listener& listener = *bound->listener;
    if (!tls != !listener.tls()) {
      spdlog::warn("reload: TLS on {} added or removed; takes effect on restart", spec.key);
    } else if (tls) {
      tls->keep_ticket_keys(*listener.tls());
      listener.set_tls(std::move(tls));
    }
  }
}

void Application::Impl::begin_shutdown() {
  if (stopping_) return;
  stopping_ = true;
  ready_timer_.cancel();
  notifier_.notify("STOPPING=1\nSTATUS=draining");
  listener_.close();
  tls_listener_.close();
  for (auto& bound : service_listeners_) {
    bound.listener->close();
    if (bound.spec->drain) bound.spec->drain();
  }
  memory_trim_.stop();
  health_checks_.stop();
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
  drain_timer_.async_wait([this, deadline](error_code ec) {
    if (!ec) wait_drained(deadline);
  });
}

// READY=1 for a service manager once the listeners are bound (start() has
// run) and, when the services depend on something outside (Redis, for limited
// routes), every worker reaches it or kReadyWaitLimit has passed.
void Application::Impl::announce_ready(std::chrono::steady_clock::time_point deadline) {
  if (!notifier_.enabled() || stopping_) return;
  const auto* services = options_.services.get();
  if (!services || !services->has_dependencies(*config_)) {
    return notifier_.notify(kReadyServing);
  }
  gather_dependencies(
      workers_, main_io_, services, last_readiness_, [this, deadline](const nlohmann::json&) {
        if (stopping_) return;
        const bool reached = std::all_of(last_readiness_.begin(), last_readiness_.end(),
                                         [](const DependencyState& d) { return d.ready; });
        if (reached) return notifier_.notify(kReadyServing);
        if (std::chrono::steady_clock::now() >= deadline) {
          spdlog::warn(
              "ready without every dependency reachable yet; routes "
              "answer by their failure modes meanwhile");
          return notifier_.notify(
              "READY=1\nSTATUS=serving; a dependency (Redis) is not reachable "
              "yet");
        }
        ready_timer_.expires_after(std::chrono::milliseconds(100));
        ready_timer_.async_wait([this, deadline](error_code ec) {
          if (!ec) announce_ready(deadline);
        });
      });
}

void Application::Impl::finish_shutdown() {
  for (auto& w : workers_) {
    Worker& worker = *w;
    asio::post(worker.io(), [&worker] {
      worker.close_all();
      worker.stop_services();
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
  admin_server_.close();
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
                         ApplicationOptions options)
    : impl_(std::make_unique<Impl>(std::move(config_path), std::move(config), std::move(options))) {
}

Application::~Application() = default;

AdminRoutes& Application::admin_routes() {
  return impl_->admin_routes();
}
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
  return impl_->listener().local_endpoint().port();
}
std::uint16_t Application::admin_port() const {
  return impl_->admin_server().local_endpoint().port();
}

}  // namespace sluice
