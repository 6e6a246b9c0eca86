#include "gateway/worker.hpp"

#include <vector>

namespace sluice {

Worker::Worker(std::size_t index, std::shared_ptr<const Config> config)
    : index_(index),
      guard_(boost::asio::make_work_guard(io_)),
      config_(std::move(config)),
      pools_(io_.get_executor()) {}

Worker::~Worker() {
  halt();
  join();
}

void Worker::add_session(ClientSession* s) {
  sessions_.insert(s);
  session_count_.store(sessions_.size(), std::memory_order_relaxed);
  metrics_.set("sluice_connections_active", "", static_cast<double>(sessions_.size()));
}

void Worker::remove_session(ClientSession* s) {
  sessions_.erase(s);
  session_count_.store(sessions_.size(), std::memory_order_relaxed);
  metrics_.set("sluice_connections_active", "", static_cast<double>(sessions_.size()));
}

void Worker::begin_drain() {
  draining_ = true;
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
  pools_.clear();
}

void Worker::start() {
  thread_ = std::thread([this] {
    io_.run();
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
