// The descriptors the data plane's upstream connections may hold, shared by
// every worker of the process. What RLIMIT_NOFILE leaves after the client
// connection cap and the reserve (Redis, the admin listener, health checks,
// listeners, logs) is theirs, and no more: stalled clients holding upstream
// connections cannot take the descriptors the limiter and the probes need.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

namespace sluice {

class ConnectionBudget {
 public:
  static constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();
  // The per-worker, per-server bound of an upstream without max_connections:
  // never above this, and never more than a quarter of the budget, so one
  // server's slow responses cannot take every upstream descriptor.
  static constexpr std::size_t kMaxDefaultPerServer = 1024;

  // Set once at start, before the workers run.
  void set_limit(std::size_t limit, std::size_t threads) {
    limit_.store(limit, std::memory_order_relaxed);
    default_per_server_ = default_per_server(limit, threads);
  }
  std::size_t limit() const { return limit_.load(std::memory_order_relaxed); }
  std::size_t in_use() const { return used_.load(std::memory_order_relaxed); }
  std::uint64_t refusals() const { return refused_.load(std::memory_order_relaxed); }
  std::size_t default_connections_per_server() const { return default_per_server_; }

  // One more upstream descriptor; false when the budget is used up.
  bool try_take() {
    const std::size_t limit = limit_.load(std::memory_order_relaxed);
    std::size_t used = used_.load(std::memory_order_relaxed);
    do {
      if (used >= limit) return false;
    } while (!used_.compare_exchange_weak(used, used + 1, std::memory_order_relaxed));
    return true;
  }
  // A connection that was not opened for want of a descriptor.
  void count_refusal() { refused_.fetch_add(1, std::memory_order_relaxed); }
  void give_back() { used_.fetch_sub(1, std::memory_order_relaxed); }

  // Pure: what `descriptors` (RLIMIT_NOFILE) leaves for upstream connections
  // once the client connection cap and the reserve are set aside. The reserve
  // is kReserved plus kReservedPerThread for each worker: its event loop
  // (epoll, eventfd, timerfd) and its Redis connections (limiter, audit,
  // consumer store and its subscription; each to every node of a cluster).
  static constexpr std::size_t kReserved = 128;
  static constexpr std::size_t kReservedPerThread = 16;
  static std::size_t upstream_share(std::size_t descriptors, std::size_t client_cap,
                                    std::size_t threads) {
    const std::size_t kept = kReserved + kReservedPerThread * threads + client_cap;
    return descriptors > kept ? descriptors - kept : 1;
  }

  // Pure: the default bound for `limit` descriptors shared by `threads` workers.
  static std::size_t default_per_server(std::size_t limit, std::size_t threads) {
    if (limit == kUnlimited) return kMaxDefaultPerServer;
    return std::clamp<std::size_t>(limit / 4 / std::max<std::size_t>(threads, 1), 1,
                                   kMaxDefaultPerServer);
  }

 private:
  std::atomic<std::size_t> limit_{kUnlimited};
  std::atomic<std::size_t> used_{0};
  std::atomic<std::uint64_t> refused_{0};
  std::size_t default_per_server_ = kMaxDefaultPerServer;
};

// The process's budget (one per process, like the descriptor limit itself).
ConnectionBudget& connection_budget();

// One descriptor of the budget, held by the connection that uses it and given
// back when it goes (or when release() is called, for a connection that closes
// before its owner does).
class DescriptorTicket {
 public:
  DescriptorTicket() = default;
  explicit DescriptorTicket(ConnectionBudget* budget) : budget_(budget) {}
  DescriptorTicket(DescriptorTicket&& other) noexcept : budget_(std::exchange(other.budget_, nullptr)) {}
  DescriptorTicket& operator=(DescriptorTicket&& other) noexcept {
    if (this != &other) {
      release();
      budget_ = std::exchange(other.budget_, nullptr);
    }
    return *this;
  }
  ~DescriptorTicket() { release(); }
  void release() {
    if (auto* b = std::exchange(budget_, nullptr)) b->give_back();
  }
  explicit operator bool() const { return budget_ != nullptr; }

 private:
  ConnectionBudget* budget_ = nullptr;
};

}  // namespace sluice
