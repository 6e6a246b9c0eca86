// Sends the spans of recorded requests to an OTLP/HTTP collector, off the
// request path: workers hand each request's spans to a bounded queue (a lock
// and a push; past tracing.max_queue_spans they are dropped and counted), and
// the exporter's own thread sends them in batches of up to max_batch_spans,
// when a batch is full or every flush_interval. One export is in flight at a
// time; a collector that answers 429, 502, 503 or 504, or cannot be reached,
// gets the same batch again after its Retry-After (at most 30 s) or a growing
// backoff, three tries in all, while the queue fills and drops. A slow or
// dead collector costs the requests nothing but their spans.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/config/config.hpp"

namespace sluice {

class HttpCall;

class SpanExporter {
 public:
  struct Counts {
    std::uint64_t exported = 0;  // accepted by the collector
    std::uint64_t dropped = 0;   // the queue was full (or tracing was turned off)
    std::uint64_t failed = 0;    // the collector refused them, or every try failed
    std::uint64_t queued = 0;    // waiting now
  };

  // `instance`: this process's service.instance.id.
  explicit SpanExporter(std::string instance);
  ~SpanExporter();
  SpanExporter(const SpanExporter&) = delete;
  SpanExporter& operator=(const SpanExporter&) = delete;

  // The settings in force from now (config->tracing); any thread.
  void configure(std::shared_ptr<const Config> config);
  // One request's spans (`count` of them, as append_exchange_spans wrote
  // them): queued, or dropped when the queue is full. Any thread.
  void submit(std::string spans, std::size_t count);
  Counts counts() const;
  // Sends what is queued (no retries), waits at most `within` for it, and
  // ends the thread. Later submissions are dropped.
  void shutdown(std::chrono::milliseconds within);

 private:
  struct Batch {
    std::shared_ptr<const std::string> body;  // kept for another try
    std::size_t spans = 0;
    int tries = 0;
  };
  void run();
  void arm_timer();
  void flush();           // on the exporter's thread
  void send(Batch batch);  // the same
  void stop_waiting();     // the same: the backoff and the export under way end now
  void answered(Batch batch, unsigned status, const std::string& error,
                const std::optional<std::string>& retry_after);
  std::vector<std::pair<std::string, std::string>> resource(const TracingConfig& t) const;

  const std::string instance_;
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer backoff_;

  mutable std::mutex mutex_;  // guards what follows, up to the thread's own state
  std::condition_variable idle_;
  std::shared_ptr<const Config> config_;
  struct Piece {  // one request's spans
    std::string spans;
    std::size_t count = 0;
  };
  std::deque<Piece> queue_;
  std::size_t queued_spans_ = 0;
  bool flush_posted_ = false;
  bool stopping_ = false;
  bool busy_ = false;  // an export (or its backoff) is under way
  Counts counts_;

  // The exporter's thread only.
  std::shared_ptr<HttpCall> call_;
  std::chrono::steady_clock::time_point last_warning_{};
  bool failing_ = false;

  std::thread thread_;  // last: it starts once everything above is built
};

}  // namespace sluice
