// The limiter seen by the rate-limit middleware: descriptors in, a decision or
// an error out. It knows nothing of Redis, so the middleware is tested with a
// fake limiter completed by hand.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "common/inline_function.hpp"
#include "gateway/config/algorithm.hpp"

namespace sluice {

// 128 bits of the SHA-256 of a limit's key value: which bucket of the limit.
using KeyHash = std::array<std::uint8_t, 16>;

// A quota's calendar periods around the gateway's estimate of the store's
// clock, in microseconds since the epoch: a period [start_us, end_us), and
// the end of the period after it. The store counts in the one of the two that
// holds its own time, and refuses the call when neither does.
struct QuotaPeriods {
  double start_us = 0;
  double end_us = 0;
  double next_end_us = 0;
};

// One bucket to check for a request: the limit and the key hash together name
// the bucket; how a store names it (a Redis key, a map key) is the store's
// business. Never holds raw request data.
struct LimitDescriptor {
  std::string limit;  // limit name from the config (used in headers and metrics)
  KeyHash key_hash{};
  double capacity = 0;
  double refill_per_second = 0;  // token bucket
  // Tokens to take as a lease on top of `cost` if the request is admitted (the
  // local layer asks; 0 = none). The store grants at most half of what the
  // bucket holds after the request, in whole tokens.
  double lease_want = 0;
  // The limit's lease_tokens: how many tokens the local layer may hold at
  // once for this bucket (0 = never leased).
  double lease_tokens = 0;
  LimitAlgorithm algorithm = LimitAlgorithm::kTokenBucket;
  double window_seconds = 0;  // sliding window and sliding log
  QuotaPeriods periods{};     // quota
  // concurrency: this request's slot (a whole number below 2^53, unique in
  // the fleet) and how long the slot lives unless renewed. A sliding log:
  // such a number too, which names the units this request logs, so that its
  // refund removes its own (a descriptor is decided once: each request has
  // its own).
  double slot = 0;
  double lease_ms = 0;
  // Decided and debited (when the request goes through and it had the
  // tokens), but its shortage never denies the request.
  bool shadow = false;
  // Which of its headers the client is shown (limits.NAME.client_headers,
  // routes[].client_headers): the X-RateLimit-* trio may name it (legacy),
  // the RateLimit and RateLimit-Policy lists carry it (ietf). Hidden from
  // both, it still decides; a 429 it causes carries Retry-After.
  bool show_legacy = true;
  bool show_ietf = true;
  // How long a request may wait for this bucket's tokens: when the wait is at
  // most this, the tokens are reserved at once (the bucket may go below zero)
  // and the request goes after the wait. 0 = no waiting (deny).
  double max_wait_seconds = 0;
};

// The state of one bucket after the decision.
struct LimitState {
  bool sufficient = false;     // had at least `cost` tokens before this request
  double remaining = 0;        // tokens left after the decision (fractions kept)
  double seconds_to_cost = 0;  // until `cost` tokens are available (0 if they already are)
  double seconds_to_full = 0;  // until the bucket is full again
  double leased = 0;           // tokens granted as a lease (debited besides `cost`)
  // Not sufficient, but reserved within max_wait_seconds: the request may go
  // after this long (0 otherwise).
  double wait_seconds = 0;
};

// The states of a decision's limits, in the descriptors' order: inline for
// the few limits a route has (no allocation per decision), on the heap beyond.
using LimitStates = boost::container::small_vector<LimitState, 4>;

// Who answered: the store, or the local layer without asking it.
enum class LocalDecision {
  kNone,       // the store (Redis) decided
  kDenyCache,  // a bucket the store recently reported short of tokens
  kLease,      // tokens leased from the store earlier
  kFallback,   // the store could not decide: the instance's share, decided locally
};

struct RateDecision {
  // Every bucket that is not shadow was sufficient or reserved within its
  // max wait: those are all debited, and each shadow bucket that was
  // sufficient. Otherwise nothing is debited.
  bool allowed = false;
  LimitStates limits;  // same order as the descriptors
  // With an error only: how long the limiter expects to stay unable to decide
  // (an open circuit breaker's time left); 0 when it does not know.
  double unavailable_seconds = 0;
  LocalDecision local = LocalDecision::kNone;
  // Allowed after a reservation: the request goes after this long (the
  // largest wait_seconds of its buckets); 0 = at once.
  double delay_seconds = 0;
};

// One bucket as the store holds it now (after refill or window slide).
struct BucketView {
  bool exists = false;          // the store holds state for it (else it is full)
  double tokens = 0;            // what a request could take now (capacity when full)
  double seconds_to_full = 0;   // until it is full again (a quota: until its period ends)
  std::int64_t read_at_us = 0;  // the store's clock when it was read
};

using BucketViewHandler = std::function<void(std::error_code, BucketView)>;

// Tokens to give back to a bucket: a lease's unspent rest, the debit of a
// request that another part of the decision denied, what a response cost
// less than its estimate; or, negative, to take (what it cost more), down to
// -max_debt below empty at most.
struct BucketRefund {
  LimitDescriptor bucket;
  double tokens = 0;
  double max_debt = 0;
};

using RefundHandler = std::function<void(std::error_code)>;

// The decision is handed over as an rvalue: passed through the layers of the
// limiter (local layer, batcher, Redis) without a copy or a move at each. The
// handler is move-only, and the middleware's (its owner, the request, and the
// pending decision with the request's completion) is kept in place.
using RateDecisionHandler = InlineFunction<void(std::error_code, RateDecision&&), 112>;

class RateLimiter {
 public:
  virtual ~RateLimiter() = default;
  // Decides all descriptors atomically. The handler is called exactly once,
  // never from inside decide(), on the executor the limiter belongs to (the
  // worker's). An error means the limiter could not decide (Redis down,
  // timeout, breaker open); the caller applies the route's failure mode.
  // `descriptors` is only read during the call.
  virtual void decide(const std::vector<LimitDescriptor>& descriptors, double cost,
                      RateDecisionHandler handler) = 0;
  // Decides as decide() does, except that a decision the limiter has at once
  // (a local layer's lease or remembered denial) is returned here, and the
  // handler is then neither taken nor called: the caller goes on at once,
  // with nothing posted. Otherwise the handler is taken and called as
  // decide()'s, and nullopt is returned.
  virtual std::optional<RateDecision> decide_or_wait(const std::vector<LimitDescriptor>& descriptors,
                                                     double cost, RateDecisionHandler& handler) {
    decide(descriptors, cost, std::move(handler));
    return std::nullopt;
  }

  // Gives tokens back: each bucket that still exists is refilled to now and
  // gets its tokens, capped at its capacity. `done` (may be empty) is called
  // once, like decide()'s handler, after every bucket was refunded or not.
  virtual void refund(std::vector<BucketRefund> refunds, RefundHandler done) = 0;
  // Whether a refund() call's outcome is each of its refunds' own: they go to
  // Redis in one script call, applied all together or none (one Redis). Not
  // where refunds are sent per hash slot (a Redis Cluster), whose calls may
  // fail apart: a caller that must know each refund's fate sends them one by
  // one there. Asked when sending (a reload may change the topology).
  virtual bool refunds_together() const { return false; }
  // Whether the worker is stopping (the limiter's drain has begun): what is
  // given back then goes at once, not at the end of the turn, so that the
  // drain, which waits for the calls in flight, waits for it too.
  virtual bool draining() const { return false; }

  // Reads one bucket without changing it; the handler is called like
  // decide()'s. A store that cannot answers an error.
  virtual void inspect(const LimitDescriptor& bucket, BucketViewHandler handler) {
    (void)bucket;
    handler(std::make_error_code(std::errc::operation_not_supported), {});
  }
  // Renews the leases of concurrency slots this instance holds (`slots`: their
  // descriptors as decided), so that only a dead instance's slots expire;
  // `done` (may be empty) is called like refund()'s. A slot already gone stays
  // gone. A store without slots answers an error.
  virtual void renew(std::vector<LimitDescriptor> slots, RefundHandler done) {
    (void)slots;
    if (done) done(std::make_error_code(std::errc::operation_not_supported));
  }
  // Forgets one bucket, so that it starts full again; `done` is called like refund()'s.
  virtual void reset(const LimitDescriptor& bucket, RefundHandler done) {
    (void)bucket;
    if (done) done(std::make_error_code(std::errc::operation_not_supported));
  }
};

}  // namespace sluice
