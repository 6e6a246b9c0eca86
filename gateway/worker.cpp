#include "gateway/worker.hpp"

#include <algorithm>
#include <vector>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "common/guarded.hpp"

namespace sluice {

Worker::Worker(std::size_t index, std::shared_ptr<const Config> config)
    : index_(index),
      guard_(boost::asio::make_work_guard(io_)),
      config_(std::move(config)),
      pools_(io_.get_executor()) {
  pools_.on_connection([this](const UpstreamConfig& upstream) {
    metrics_.add("sluice_upstream_connections_total",
                 scratch_labels({{"upstream", upstream.name}}));
  });
  // A burst's idle connections closed: their memory (the connection, its
  // socket's state, its parser) is freed in bulk, for the heap trim.
  pools_.on_surplus_closed([this](std::size_t closed) {
    freed_bytes_.fetch_add(closed * kClosedConnectionBytes, std::memory_order_relaxed);
  });
  // Counters that alerts watch have a series from the start.
  for (const char* family : {"sluice_internal_errors_total", "sluice_connections_shed_total",
                             "sluice_upstream_retries_total"}) {
    metrics_.add(family, "", 0);
  }
}

Worker::~Worker() {
  halt();
  join();
}

void Worker::set_config(std::shared_ptr<const Config> config) {
  config_ = std::move(config);
  if (services_) services_->on_config(config_);
}

void Worker::start_services(WorkerServicesFactory& factory) {
  services_ =
      factory.make(WorkerContext{index_, io_.get_executor(), config_, metrics_, freed_bytes_});
  chain_ = services_->make_chain();
}

void Worker::before_scrape() {
  if (services_) services_->before_scrape();
}

DependencyState Worker::readiness() const {
  return services_ ? services_->readiness() : DependencyState{};
}

void Worker::stop_services() {
  if (services_) services_->on_stop();
  // The chain and the services go on this thread, before the io_context.
  chain_.clear();
  services_.reset();
}

void Worker::add_session(ClientSession* s) {
  sessions_.insert(s);
  session_count_.store(sessions_.size(), std::memory_order_relaxed);
  if (sessions_.size() > peak_session_count_.load(std::memory_order_relaxed)) {
    peak_session_count_.store(sessions_.size(), std::memory_order_relaxed);
  }
  metrics_.set("sluice_connections_active", "", static_cast<double>(sessions_.size()));
}

void Worker::remove_session(ClientSession* s) {
  sessions_.erase(s);
  session_count_.store(sessions_.size(), std::memory_order_relaxed);
  metrics_.set("sluice_connections_active", "", static_cast<double>(sessions_.size()));
}

void Worker::tunnels_changed(int delta) {
  tunnels_ += delta;
  metrics_.set("sluice_websocket_tunnels_active", "", static_cast<double>(tunnels_));
}

void Worker::shed_idle(std::size_t n) {
  using TimePoint = std::chrono::steady_clock::time_point;
  std::vector<std::pair<TimePoint, ClientSession*>> idle;
  for (auto* s : sessions_) {
    if (auto since = s->idle_since()) idle.emplace_back(*since, s);
  }
  n = std::min(n, idle.size());
  std::partial_sort(idle.begin(), idle.begin() + static_cast<std::ptrdiff_t>(n), idle.end());
  for (std::size_t i = 0; i < n; ++i) {
    if (sessions_.count(idle[i].second)) idle[i].second->force_close();
  }
  if (n > 0) metrics_.add("sluice_connections_shed_total", "", static_cast<double>(n));
}

std::unique_ptr<char[]> Worker::take_relay_buffer() { return relay_buffers_.take(); }

void Worker::return_relay_buffer(std::unique_ptr<char[]> buffer) {
  relay_buffers_.give_back(std::move(buffer));
}

void Worker::age_relay_buffers() {
  boost::asio::post(io_, [this] {
    freed_bytes_.fetch_add(relay_buffers_.age(), std::memory_order_relaxed);
  });
}

void Worker::begin_drain() {
  draining_ = true;
  mirrors_.cut_all();
  // on_drain may end a session and so change the set: iterate over a copy.
  std::vector<ClientSession*> sessions(sessions_.begin(), sessions_.end());
  for (auto* s : sessions) {
    if (sessions_.count(s)) s->on_drain();
  }
}

void Worker::close_all() {
  std::vector<ClientSession*> sessions(sessions_.begin(), sessions_.end());
  for (auto* s : sessions) {
    if (sessions_.count(s)) s->force_close();
  }
  mirrors_.cut_all();
  pools_.clear();
}

void Worker::start() {
  thread_ = std::thread([this] {
    // An exception that escapes a handler ends that handler only.
    run_guarded(io_, [this](std::string_view what, bool reported) {
      spdlog::error("worker {}: exception escaped a handler: {}", index_, what);
      if (!reported) metrics_.add("sluice_internal_errors_total", "");
    });
    finished_ = true;
  });
}

void Worker::release() {
  guard_.reset();
}

void Worker::halt() {
  guard_.reset();
  io_.stop();
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace sluice
