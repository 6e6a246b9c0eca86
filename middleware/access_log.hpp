// The access log: one JSON line per finished exchange to stdout, when
// log.access_log is on. An exchange observer, one per worker, called on the
// worker's executor; it never logs API keys or other header values.
//
// By default each line is written as soon as it is made. With
// log.access_log_flush_ms above 0, lines are gathered as nginx's
// `access_log ... buffer=64k flush=1s` gathers them, so that a request costs
// no system call of its own: they are written once kBufferBytes are waiting,
// at most that long after the first of them, at each reload (which may have
// turned the log off or shortened the wait), and when the worker stops (a
// SIGKILL loses at most that long of lines). Each write holds whole lines and goes through stdout's lock, so the
// workers' lines never mix.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/middleware.hpp"

namespace sluice {

class AccessLog final : public ExchangeObserver, public std::enable_shared_from_this<AccessLog> {
 public:
  static constexpr std::size_t kBufferBytes = 64 * 1024;

  explicit AccessLog(boost::asio::io_context::executor_type executor);
  ~AccessLog() override;  // writes what is waiting
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // Off (and nothing left waiting): no summary needs to be made for it. It
  // agrees with on_exchange, which flushes what waits when the log is off.
  bool wants(const Config& config, bool /*trace_recorded*/) const override {
    return config.log.access_log || !pending_.empty();
  }
  void on_exchange(const Config& config, const ExchangeSummary& summary) override;
  // Writes the lines waiting, if any (a reload calls it too).
  void flush();

 private:
  std::string pending_;
  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
};

}  // namespace sluice
