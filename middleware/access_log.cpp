#include "middleware/access_log.hpp"

#include <chrono>
#include <cstdio>

#include "middleware/access_log_line.hpp"

namespace sluice {

AccessLog::AccessLog(boost::asio::io_context::executor_type executor) : timer_(executor) {}

AccessLog::~AccessLog() {
  flush();
}

void AccessLog::on_exchange(const Config& config, const ExchangeSummary& summary) {
  if (!config.log.access_log) return flush();  // a reload turned it off: what waits goes now
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  append_access_log_line(pending_, summary, ms);
  const auto wait = config.log.access_log_flush;
  if (wait.count() == 0 || pending_.size() >= kBufferBytes) return flush();
  if (timer_armed_) return;
  timer_.expires_after(wait);
  timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    const auto self = weak.lock();
    if (!self || ec) return;
    self->timer_armed_ = false;
    self->flush();
  });
  timer_armed_ = true;
}

void AccessLog::flush() {
  if (pending_.empty()) return;
  std::fwrite(pending_.data(), 1, pending_.size(), stdout);
  std::fflush(stdout);
  pending_.clear();
  if (pending_.capacity() > 2 * kBufferBytes) pending_.shrink_to_fit();
}

}  // namespace sluice
