// Gives freed heap pages back to the system: glibc keeps the pages of freed
// per-connection memory, so after a large wave of connections has closed (or
// the workers freed many relay buffers, or emptied a large table: the denial
// cache after a flood of distinct callers) malloc_trim runs. Checks on the main thread
// every kCheckEvery; reads only what the workers publish for any thread, and
// has each worker free the relay buffers it kept unused since the last check.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace sluice {

class Worker;

class MemoryTrim {
 public:
  static constexpr auto kCheckEvery = std::chrono::seconds(2);
  // Trims once the connection count has fallen this far below its recent peak.
  static constexpr std::size_t kAfterClosing = 256;
  // Trims once the workers freed this much in bulk (relay buffers, tables).
  static constexpr std::size_t kAfterFreedBytes = 8 * 1024 * 1024;

  MemoryTrim(boost::asio::io_context& io, const std::vector<std::unique_ptr<Worker>>& workers)
      : timer_(io), workers_(workers) {}

  void start();
  void stop();

 private:
  void check();

  boost::asio::steady_timer timer_;
  const std::vector<std::unique_ptr<Worker>>& workers_;
  std::size_t peak_connections_ = 0;  // since the last trim
  std::size_t freed_bytes_ = 0;       // since the last trim
  bool stopped_ = false;
};

}  // namespace sluice
