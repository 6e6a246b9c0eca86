// What the admin endpoints of the rate limiter share: the registry of the
// process's workers (each registers what an endpoint uses of it, on its own
// executor), and the one reply of an admin request that several workers may
// take part in answering.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "gateway/admin/admin_routes.hpp"

namespace sluice {

// The workers of the process, as their services register them (any thread;
// a mutex guards the list). A worker whose services are gone drops out.
// `Worker` is read and called on its entry's executor only.
template <typename Worker>
class WorkerRegistry {
 public:
  struct Entry {
    boost::asio::any_io_executor executor;
    std::weak_ptr<Worker> worker;
  };

  void add(boost::asio::any_io_executor executor, std::weak_ptr<Worker> worker) {
    std::lock_guard lock(mutex_);
    entries_.push_back({std::move(executor), std::move(worker)});
  }

  // Calls `visit(executor, weak worker)` for each live worker.
  template <typename Visit>
  void each(Visit visit) {
    std::vector<Entry> entries;
    {
      std::lock_guard lock(mutex_);
      std::erase_if(entries_, [](const Entry& e) { return e.worker.expired(); });
      entries = entries_;
    }
    for (const auto& entry : entries) visit(entry.executor, entry.worker);
  }

  // The live workers, and which of them takes the next request (round robin).
  std::vector<Entry> live(std::size_t& chosen) {
    std::lock_guard lock(mutex_);
    std::erase_if(entries_, [](const Entry& e) { return e.worker.expired(); });
    chosen = entries_.empty() ? 0 : next_++ % entries_.size();
    return entries_;
  }

 private:
  std::mutex mutex_;
  std::vector<Entry> entries_;
  std::size_t next_ = 0;
};

// The result label of an admin request's metric, by its status.
inline std::string_view admin_result_label(unsigned status) {
  switch (status) {
    case 200:
    case 201:
    case 204:
      return "ok";
    case 400:
      return "bad_request";
    case 404:
      return "not_found";
    default:
      return "unavailable";
  }
}

// The one admin reply of a request, shared by the workers that take part:
// the first (and only) answer moves it out and calls it, so that its hold on
// the admin session goes with the answer, never released on a worker.
class ReplyOnce {
 public:
  explicit ReplyOnce(AdminReply reply) : reply_(std::move(reply)) {}
  void operator()(AdminResponse res) {
    AdminReply reply;
    {
      std::lock_guard lock(mutex_);
      reply = std::move(reply_);
      reply_ = nullptr;
    }
    if (reply) reply(std::move(res));
  }

 private:
  std::mutex mutex_;
  AdminReply reply_;
};

}  // namespace sluice
