// Cost settled from the response (routes[].cost_from_response): a request
// is admitted at its estimate (cost or cost_header); once its exchange has
// ended, the difference to the real cost the upstream reported (a response
// header or trailer) goes to the same limits: refunded when the response cost
// less, debited when it cost more (down to -max_debt below empty). Exactly
// once per request: from the request's end hook, which runs once, also when
// the client left or the connection was cut. The settlements of one turn of
// the worker's loop go to the limiter together, as one refund call where
// its outcome is each refund's (one Redis), else each limit's part on its
// own (a Redis Cluster, whose slots' calls may fail apart). What certainly
// never reached Redis (not connected, an open breaker) waits in a bounded
// queue per worker and is sent again (at most kAttempts times, a second
// apart). What failed otherwise (a timeout: Redis may have applied it) is
// never sent twice. A request with a part that never reached Redis in the end
// (or found the queue full) counts as result="failed"; else one with a part
// whose fate is unknown (a timeout, a connection lost in flight) as
// result="unknown". Used on the worker's executor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/middleware.hpp"
#include "gateway/series_cache.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

class MetricsShard;

// A usage value: a whole number of at most 2^53 written in decimal digits
// only, with any number of leading zeros (surrounding blanks allowed);
// nullopt for anything else ("", "-1", "1.5", "12abc", a huge number).
std::optional<double> parse_usage(std::string_view text);

// What the request really cost: 0 for a status the route does not count;
// the usage the response's header carried when it is valid; else the usage
// its body carried (`body_usage`, cost_from_response.body); else (none,
// invalid, no response at all) the estimate.
double settled_cost(const CostFromResponse& settle, const ExchangeEnd& end, double estimate,
                    std::optional<double> body_usage = std::nullopt);

// Appends to `out` the limits of `descriptors` whose cost a request debited
// when `decision` admitted it: every limit that counts cost, enforced, or in
// shadow when it had room (a concurrency limit takes a slot, not the cost).
void append_debited(std::vector<LimitDescriptor>& out,
                    const std::vector<LimitDescriptor>& descriptors, const RateDecision& decision);

class Settler : public std::enable_shared_from_this<Settler> {
 public:
  using Executor = boost::asio::io_context::executor_type;
  static constexpr std::size_t kMaxQueued = 10000;
  static constexpr int kAttempts = 3;

  Settler(const Executor& executor, std::shared_ptr<RateLimiter> limiter, MetricsShard& metrics);

  // Settles a request of `route` that debited `estimate` on each of
  // `debited` (append_debited()) and really cost `real`: its parts are sent
  // at the end of this turn of the loop.
  void settle(const std::string& route, std::span<const LimitDescriptor> debited,
              double estimate, double real, double max_debt);

  // The worker stops: the parts of this turn and those waiting to be sent
  // again go now, once (the limiter's drain then waits for them); none waits
  // after this.
  void drain();

  // A response of `route` whose body was read for its usage came to
  // `outcome` (sluice_ratelimit_body_usage_total).
  void count_body_usage(const std::string& route, std::string_view outcome) {
    body_usage_.add(route, outcome);
  }

  // The parts waiting to be sent again.
  std::size_t queued() const { return parked_parts_; }

 private:
  // What became of a part, the worst first from the bottom: a request's
  // settlement counts as the worst of its parts.
  enum class PartOutcome : std::uint8_t {
    kApplied,
    kUnknown,  // sent, but unanswered in time or its connection lost: maybe applied
    kFailed,   // certainly never applied
  };
  // One request's settlement, counted once all its parts are done.
  struct Settlement {
    std::string route;
    double units = 0;  // refunded (> 0) or debited (< 0) on each limit
    std::size_t parts_left = 0;
    PartOutcome outcome = PartOutcome::kApplied;
  };
  // Its part on one limit.
  struct Part {
    std::shared_ptr<Settlement> whole;
    BucketRefund refund;
  };
  // Parts sent in one refund call, all with its outcome.
  struct Batch {
    std::vector<Part> parts;
    int attempts = 0;
  };
  // A batch waiting to be sent again.
  struct Parked {
    Batch batch;
    std::shared_ptr<boost::asio::steady_timer> timer;
  };
  // Sends this turn's parts.
  void flush();
  void send(Batch batch);
  void sent(Batch& batch, std::error_code ec);
  void park(Batch batch);
  void part_done(const Part& part, PartOutcome outcome);
  void count(const std::string& route, std::string_view result);

  Executor executor_;
  std::shared_ptr<RateLimiter> limiter_;
  SeriesCache settlements_;    // sluice_ratelimit_settlements_total by route, result
  SeriesCache settled_units_;  // sluice_ratelimit_settled_units_total by route, direction
  SeriesCache body_usage_;     // sluice_ratelimit_body_usage_total by route, result
  std::vector<Part> pending_;  // this turn's parts
  bool flush_posted_ = false;
  std::unordered_map<std::uint64_t, Parked> parked_;  // by the order they were parked in
  std::size_t parked_parts_ = 0;
  std::uint64_t next_park_id_ = 0;
  bool draining_ = false;
};

}  // namespace sluice
