#include "telemetry/span_exporter.hpp"

#include <algorithm>
#include <charconv>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "gateway/version.hpp"
#include "telemetry/otlp_json.hpp"
#include "upstream/http/http_call.hpp"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxTries = 3;
constexpr auto kMaxBackoff = std::chrono::seconds(30);
constexpr auto kWarningEvery = std::chrono::seconds(60);

bool retryable(unsigned status) {
  return status == 0 || status == 429 || status == 502 || status == 503 || status == 504;
}

// How long before the next try: the collector's Retry-After (seconds), else
// 1 s, then 2 s; never more than 30 s.
std::chrono::milliseconds backoff(int tries, const std::optional<std::string>& retry_after) {
  if (retry_after) {
    unsigned seconds = 0;
    const auto* end = retry_after->data() + retry_after->size();
    const auto r = std::from_chars(retry_after->data(), end, seconds);
    if (r.ec == std::errc() && r.ptr == end) {
      return std::min<std::chrono::milliseconds>(std::chrono::seconds(seconds), kMaxBackoff);
    }
  }
  return std::chrono::milliseconds(1000) * (1 << std::min(tries - 1, 4));
}

}  // namespace

SpanExporter::SpanExporter(std::string instance)
    : instance_(std::move(instance)),
      work_(io_.get_executor()),
      timer_(io_),
      backoff_(io_),
      thread_([this] { run(); }) {}

// The loop survives what a handler throws (a failed allocation for a batch):
// the exporter goes on; the requests never see it.
void SpanExporter::run() {
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {
      spdlog::error("tracing: the exporter caught: {}", e.what());
    }
  }
}

SpanExporter::~SpanExporter() { shutdown(std::chrono::milliseconds(0)); }

void SpanExporter::configure(std::shared_ptr<const Config> config) {
  std::lock_guard lock(mutex_);
  config_ = std::move(config);
  // The flush interval in force from now (the timer waits anew).
  boost::asio::post(io_, [this] { arm_timer(); });
}

void SpanExporter::submit(std::string spans, std::size_t count) {
  std::lock_guard lock(mutex_);
  if (stopping_ || !config_ || !config_->tracing.enabled() ||
      queued_spans_ + count > config_->tracing.max_queue_spans) {
    counts_.dropped += count;
    return;
  }
  queue_.push_back({std::move(spans), count});
  queued_spans_ += count;
  if (queued_spans_ >= config_->tracing.max_batch_spans && !flush_posted_ && !busy_) {
    flush_posted_ = true;
    boost::asio::post(io_, [this] { flush(); });
  }
}

SpanExporter::Counts SpanExporter::counts() const {
  std::lock_guard lock(mutex_);
  Counts counts = counts_;
  counts.queued = queued_spans_;
  return counts;
}

void SpanExporter::shutdown(std::chrono::milliseconds within) {
  if (!thread_.joinable()) return;
  {
    std::unique_lock lock(mutex_);
    stopping_ = true;
    // A batch waiting to be tried again goes no more (counted failed); what
    // is queued goes now, without retries.
    boost::asio::post(io_, [this] {
      backoff_.cancel();
      flush();
    });
    idle_.wait_for(lock, within, [this] { return queue_.empty() && !busy_; });
    counts_.dropped += queued_spans_;
    queued_spans_ = 0;
    queue_.clear();
  }
  // The export still under way ends (counted failed); then nothing is left
  // for the thread to run.
  boost::asio::post(io_, [this] {
    timer_.cancel();
    stop_waiting();
  });
  work_.reset();
  thread_.join();
}

void SpanExporter::stop_waiting() {
  backoff_.cancel();
  if (auto call = std::exchange(call_, nullptr)) call->cancel();
}

void SpanExporter::arm_timer() {
  std::chrono::milliseconds interval{1000};
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    if (config_) interval = config_->tracing.flush_interval;
  }
  timer_.expires_after(interval);  // (a wait under way ends, cancelled)
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    flush();
    arm_timer();
  });
}

void SpanExporter::flush() {
  std::shared_ptr<const Config> config;
  std::vector<std::string> pieces;
  Batch batch;
  {
    std::lock_guard lock(mutex_);
    flush_posted_ = false;
    if (busy_) return;
    if (!config_ || !config_->tracing.enabled()) {
      counts_.dropped += queued_spans_;
      queued_spans_ = 0;
      queue_.clear();
    }
    if (queue_.empty()) {
      idle_.notify_all();
      return;
    }
    config = config_;
    // Whole requests, at least one, until the batch holds max_batch_spans.
    std::size_t taken = 0;
    while (taken < queue_.size() &&
           (taken == 0 || batch.spans + queue_[taken].count <= config->tracing.max_batch_spans)) {
      batch.spans += queue_[taken].count;
      pieces.push_back(std::move(queue_[taken].spans));
      ++taken;
    }
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(taken));
    queued_spans_ -= batch.spans;
    busy_ = true;
  }
  batch.body = std::make_shared<const std::string>(
      otlp_export_request(resource(config->tracing), version(), pieces));
  send(std::move(batch));
}

std::vector<std::pair<std::string, std::string>> SpanExporter::resource(
    const TracingConfig& t) const {
  std::vector<std::pair<std::string, std::string>> out = {
      {"service.name", t.service_name},
      {"service.instance.id", instance_},
      {"service.version", std::string(version())},
      {"telemetry.sdk.name", "sluice"},
      {"telemetry.sdk.language", "cpp"}};
  for (const auto& [key, value] : t.resource_attributes) {
    auto same = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == key; });
    if (same != out.end()) {
      same->second = value;
    } else {
      out.emplace_back(key, value);
    }
  }
  return out;
}

void SpanExporter::send(Batch batch) {
  std::shared_ptr<const Config> config;
  bool stopping = false;
  {
    std::lock_guard lock(mutex_);
    config = config_;
    stopping = stopping_;
    if (!config || !config->tracing.enabled()) {
      // Tracing was turned off while the batch waited: dropped, not sent.
      counts_.dropped += batch.spans;
      busy_ = false;
      if (queue_.empty()) idle_.notify_all();
      return;
    }
  }
  const TracingConfig& t = config->tracing;
  ++batch.tries;
  HttpCallSpec spec;
  spec.method = "POST";
  spec.url = t.endpoint;
  spec.tls = t.tls;
  spec.user_agent = "sluice/" + std::string(version());
  spec.headers = t.headers;
  spec.headers.emplace_back("Content-Type", "application/json");
  spec.shared_body = batch.body;
  spec.timeout = stopping ? std::min(t.timeout, std::chrono::milliseconds(2000)) : t.timeout;
  spec.max_body = 1u << 20;  // a partial-success answer is small
  auto shared = std::make_shared<Batch>(std::move(batch));
  auto call = start_http_call(io_.get_executor(), std::move(spec),
                              [this, shared](HttpCallResult result) {
                                call_ = nullptr;
                                answered(std::move(*shared),
                                         result.error.empty() ? result.status : 0, result.error,
                                         result.retry_after);
                              });
  if (shared->body) call_ = std::move(call);  // still under way (not answered at once)
}

void SpanExporter::answered(Batch batch, unsigned status, const std::string& error,
                            const std::optional<std::string>& retry_after) {
  const bool ok = status >= 200 && status < 300;
  bool stopping = false;
  {
    std::lock_guard lock(mutex_);
    stopping = stopping_;
  }
  if (!ok && retryable(status) && batch.tries < kMaxTries && !stopping) {
    backoff_.expires_after(backoff(batch.tries, retry_after));
    auto shared = std::make_shared<Batch>(std::move(batch));
    backoff_.async_wait([this, shared](boost::system::error_code ec) {
      if (ec) return answered(std::move(*shared), 0, "stopped", std::nullopt);
      send(std::move(*shared));
    });
    return;
  }
  const auto now = Clock::now();
  if (!ok && (!failing_ || now - last_warning_ >= kWarningEvery)) {
    spdlog::warn("tracing: {} spans not exported: {}", batch.spans,
                 error.empty() ? "the collector answered " + std::to_string(status) : error);
    last_warning_ = now;
  } else if (ok && failing_) {
    spdlog::info("tracing: the collector takes spans again");
  }
  failing_ = !ok;
  std::lock_guard lock(mutex_);
  (ok ? counts_.exported : counts_.failed) += batch.spans;
  busy_ = false;
  const bool more = config_ && !queue_.empty() &&
                    (stopping_ || queued_spans_ >= config_->tracing.max_batch_spans);
  if (more && !flush_posted_) {
    flush_posted_ = true;
    boost::asio::post(io_, [this] { flush(); });
  }
  if (queue_.empty()) idle_.notify_all();
}

}  // namespace sluice
