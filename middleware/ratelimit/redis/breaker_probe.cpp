#include "middleware/ratelimit/redis/breaker_probe.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/redis/client_switch.hpp"

namespace sluice {
namespace {

double seconds(std::chrono::milliseconds d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

BreakerProbe::BreakerProbe(boost::asio::any_io_executor executor, ClientSwitch& clients,
                           MetricsShard& metrics, unsigned failures,
                           std::chrono::milliseconds open_for)
    : executor_(std::move(executor)),
      clients_(clients),
      metrics_(metrics),
      failures_(failures),
      open_for_(open_for),
      breaker_(failures, open_for) {}

std::optional<double> BreakerProbe::refuse(bool client_ready, Clock::time_point now) {
  const bool trial_pending = !client_ready && breaker_.state(now) == CircuitBreaker::State::kHalfOpen;
  if (!trial_pending && breaker_.allow(now)) return std::nullopt;
  sync(now);
  return seconds(breaker_.open_remaining(now));
}

void BreakerProbe::on_success(Clock::time_point now) {
  breaker_.on_success(now);
  sync(now);
}

double BreakerProbe::on_failure(std::error_code ec, Clock::time_point now) {
  breaker_.on_failure(now);
  if (sync(now)) {
    spdlog::debug("redis circuit breaker open after: {}", ec.message());
    probe_when_due(now);
  }
  return seconds(breaker_.open_remaining(now));
}

void BreakerProbe::reconfigure(unsigned failures, std::chrono::milliseconds open_for) {
  if (failures == failures_ && open_for == open_for_) return;
  failures_ = failures;
  open_for_ = open_for;
  breaker_ = CircuitBreaker(failures, open_for);
  sync(Clock::now());
  ++seq_;  // a probe of the old breaker has nothing left to do
  timer_.cancel();
}

void BreakerProbe::probe_when_due(Clock::time_point now) {
  arm(std::max(breaker_.open_remaining(now), std::chrono::milliseconds{1}));
}

void BreakerProbe::arm(std::chrono::milliseconds delay) {
  if (closed_) return;
  timer_.expires_after(delay);
  timer_.async_wait([weak = weak_from_this(), seq = ++seq_](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || seq != self->seq_) return;
    self->probe();
  });
}

void BreakerProbe::probe() {
  if (closed_) return;
  redis::Client& client = clients_.client();
  const auto now = Clock::now();
  switch (breaker_.state(now)) {
    case CircuitBreaker::State::kClosed:
      sync(now);
      return;
    case CircuitBreaker::State::kOpen:
      return probe_when_due(now);
    case CircuitBreaker::State::kHalfOpen:
      break;
  }
  if (!client.is_ready()) {
    // No trial on a connection that cannot carry it: connect now rather
    // than after the client's own backoff (the probe is paced by open_ms),
    // then look again; a failed attempt waits another open period.
    const auto seq = ++seq_;
    client.connect_now([weak = weak_from_this(), seq](std::error_code ec) {
      auto self = weak.lock();
      if (!self || seq != self->seq_) return;
      if (ec) {
        // Still unreachable: open for another period, so that Retry-After
        // and the gauge tell the truth until the next probe.
        const auto now = Clock::now();
        self->breaker_.reopen(now);
        self->sync(now);
        return self->arm(self->breaker_.open_for());
      }
      self->probe();
    });
    return;
  }
  if (!breaker_.allow(now)) {
    // A request holds the trial; its outcome closes or re-opens the breaker
    // (re-opening arms a probe). Look again after a trial's lifetime.
    return arm(breaker_.open_for());
  }
  const auto seq = ++seq_;
  client.command({"PING"}, [weak = weak_from_this(), seq](std::error_code ec, redis::Reply) {
    auto self = weak.lock();
    if (!self || seq != self->seq_) return;
    self->on_probe_reply(ec);
  });
}

void BreakerProbe::on_probe_reply(std::error_code ec) {
  const auto now = Clock::now();
  if (!ec) {
    breaker_.on_success(now);
    if (!sync(now)) spdlog::info("redis circuit breaker closed: PING answered");
    return;
  }
  metrics_.add("sluice_redis_errors_total", scratch_labels({{"kind", redis::error_kind(ec)}}));
  breaker_.on_failure(now);
  if (sync(now)) probe_when_due(now);
}

bool BreakerProbe::sync(Clock::time_point now) {
  const bool open = breaker_.is_open(now);
  open_.store(open, std::memory_order_relaxed);
  return open;
}

void BreakerProbe::close() {
  closed_ = true;
  ++seq_;
  timer_.cancel();
}

}  // namespace sluice
