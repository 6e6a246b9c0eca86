#include "gateway/memory_trim.hpp"

#include <malloc.h>

#include <algorithm>

#include "gateway/worker.hpp"

namespace sluice {

void MemoryTrim::start() {
  timer_.expires_after(kCheckEvery);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopped_) return;
    check();
    start();
  });
}

void MemoryTrim::stop() {
  stopped_ = true;
  timer_.cancel();
}

void MemoryTrim::check() {
  std::size_t now = 0;
  std::size_t peak = 0;
  for (const auto& w : workers_) {
    w->age_relay_buffers();
    now += w->session_count();
    peak += w->take_peak_session_count();
    freed_bytes_ += w->take_freed_bytes();
  }
  peak_connections_ = std::max(peak_connections_, peak);
  if (peak_connections_ >= now + kAfterClosing || freed_bytes_ >= kAfterFreedBytes) {
    freed_bytes_ = 0;
    malloc_trim(0);
    peak_connections_ = now;
  }
}

}  // namespace sluice
