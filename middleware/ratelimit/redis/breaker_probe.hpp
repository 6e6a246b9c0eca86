// The limiter's circuit breaker on one Redis (not a Cluster: there a dead node
// fails only its own slots), with the probe that closes it. Without traffic
// nothing would ever close an open breaker, and the gauge and /readyz would
// report it open long after Redis is back. So while it is open the probe
// takes the half-open trial itself, with a PING, as soon as the open period is
// over; a failed PING re-opens it and the next probe follows one open period
// later. While the connection is not ready (the client is reconnecting with
// its own capped backoff) the probe connects first rather than failing at
// once. Used on the limiter's executor, except open(), which any thread may read.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <system_error>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "middleware/ratelimit/circuit_breaker.hpp"

namespace sluice {

class ClientSwitch;
class MetricsShard;

class BreakerProbe : public std::enable_shared_from_this<BreakerProbe> {
 public:
  using Clock = CircuitBreaker::Clock;

  // `clients` and `metrics` must outlive it.
  BreakerProbe(boost::asio::any_io_executor executor, ClientSwitch& clients,
               MetricsShard& metrics, unsigned failures, std::chrono::milliseconds open_for);

  // A call about to be made on `ready_client` (whether its connection is up):
  // nullopt when it may go, else the seconds the breaker stays open. A
  // half-open breaker's trial on a connection that is not up would fail at
  // once and hold the breaker open for another period, so that trial is
  // left to the probe, which connects first.
  std::optional<double> refuse(bool client_ready, Clock::time_point now);

  // A call's outcome. A failure returns the seconds the breaker is open
  // for from now (0 while it stays closed).
  void on_success(Clock::time_point now);
  double on_failure(std::error_code ec, Clock::time_point now);

  // New settings from a reload; the same ones change nothing.
  void reconfigure(unsigned failures, std::chrono::milliseconds open_for);

  bool open() const { return open_.load(std::memory_order_relaxed); }

  void close();

 private:
  void probe_when_due(Clock::time_point now);
  void arm(std::chrono::milliseconds delay);
  void probe();
  void on_probe_reply(std::error_code ec);
  // The breaker's open state as every reader sees it (/readyz, the
  // sluice_redis_circuit_open gauge), refreshed after each of its
  // transitions. Returns it.
  bool sync(Clock::time_point now);

  boost::asio::any_io_executor executor_;
  ClientSwitch& clients_;
  MetricsShard& metrics_;
  unsigned failures_;
  std::chrono::milliseconds open_for_;
  CircuitBreaker breaker_;
  std::atomic<bool> open_{false};
  boost::asio::steady_timer timer_{executor_};
  std::uint64_t seq_ = 0;  // a probe step runs only if nothing superseded it
  bool closed_ = false;
};

}  // namespace sluice
