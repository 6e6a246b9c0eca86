#include "middleware/ratelimit/local/local_layer.hpp"

#include <algorithm>
#include <chrono>

#include <boost/asio/post.hpp>

#include "gateway/metrics.hpp"

namespace sluice {

std::int64_t steady_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The buckets of a request that needs the store while some of its buckets are
// leased: which were served from leases, and what was asked of the store.
struct LocalLayer::LeasedCall {
  std::vector<std::uint8_t> from_lease;  // per descriptor: 1 = spent from its lease
  std::vector<LimitDescriptor> asked;    // the others, with the lease they ask for
  std::vector<std::size_t> positions;    // asked[j] is descriptors[positions[j]]
  std::int64_t sent_us = 0;
};

LocalLayer::LocalLayer(boost::asio::any_io_executor executor, std::shared_ptr<RateLimiter> store,
                       MetricsShard& metrics, const LocalConfig& config, Clock now_us)
    : executor_(std::move(executor)),
      store_(std::move(store)),
      metrics_(metrics),
      now_us_(std::move(now_us)),
      deny_cache_on_(config.deny_cache),
      sweep_timer_(executor_) {}

void LocalLayer::decide(const std::vector<LimitDescriptor>& descriptors, double cost,
                        RateDecisionHandler handler) {
  if (draining_) return store_->decide(descriptors, cost, std::move(handler));
  const std::int64_t now = now_us_();
  const bool leased = std::any_of(descriptors.begin(), descriptors.end(),
                                  [](const LimitDescriptor& d) { return d.lease_tokens > 0; });
  if (leased) return decide_with_leases(descriptors, cost, now, std::move(handler));
  if (auto denial = cached_denial(descriptors, cost, now, {})) {
    return answer_now(std::move(handler), std::move(*denial));
  }
  if (!deny_cache_on_) return store_->decide(descriptors, cost, std::move(handler));
  store_->decide(descriptors, cost,
                 [self = shared_from_this(), &descriptors, cost, now,
                  handler = std::move(handler)](std::error_code ec, RateDecision decision) {
                   if (!ec && !decision.allowed) {
                     self->remember_denials(descriptors, cost, decision, now);
                   }
                   handler(ec, std::move(decision));
                 });
}

// A denial when any bucket not served from a lease is cached as short of
// `cost`: those buckets report their cached state, the others (not asked) the
// state the store last reported for them, else their lease's, else their
// capacity.
std::optional<RateDecision> LocalLayer::cached_denial(
    const std::vector<LimitDescriptor>& descriptors, double cost, std::int64_t now,
    const std::vector<std::uint8_t>& from_lease) {
  if (!deny_cache_on_ || cache_.size() == 0) return std::nullopt;
  std::size_t first = descriptors.size();  // the first bucket cached as denied
  std::optional<LimitState> state;
  for (std::size_t i = 0; i < descriptors.size() && !state; ++i) {
    if (!from_lease.empty() && from_lease[i]) continue;
    state = cache_.denied(descriptors[i], cost, now);
    first = i;
  }
  if (!state) return std::nullopt;
  RateDecision decision;
  decision.limits.reserve(descriptors.size());
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    std::optional<LimitState> reported;
    if (i == first) {
      reported = state;
    } else if (i > first && (from_lease.empty() || !from_lease[i])) {
      reported = cache_.denied(descriptors[i], cost, now);
    }
    if (!reported) reported = cache_.known(descriptors[i], cost, now);
    decision.limits.push_back(reported ? *reported : leases_.state(descriptors[i], cost, now));
  }
  decision.local = LocalDecision::kDenyCache;
  return decision;
}

void LocalLayer::decide_with_leases(const std::vector<LimitDescriptor>& descriptors, double cost,
                                    std::int64_t now, RateDecisionHandler handler) {
  auto call = std::make_shared<LeasedCall>();
  call->sent_us = now;
  call->from_lease.assign(descriptors.size(), 0);
  bool all_leased = true;
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    const LimitDescriptor& d = descriptors[i];
    if (d.lease_tokens > 0 && leases_.try_spend(d, cost, now)) {
      call->from_lease[i] = 1;
    } else {
      all_leased = false;
    }
  }
  arm_sweep();  // the table now knows these buckets
  if (auto denial = cached_denial(descriptors, cost, now, call->from_lease)) {
    put_back(descriptors, cost, call->from_lease);
    return answer_now(std::move(handler), std::move(*denial));
  }
  if (all_leased) {
    RateDecision decision;
    decision.allowed = true;
    decision.local = LocalDecision::kLease;
    decision.limits.reserve(descriptors.size());
    for (const auto& d : descriptors) decision.limits.push_back(leases_.state(d, cost, now));
    return answer_now(std::move(handler), std::move(decision));
  }
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    if (call->from_lease[i]) continue;
    LimitDescriptor& asked = call->asked.emplace_back(descriptors[i]);
    if (asked.lease_tokens > 0) asked.lease_want = leases_.want(asked, cost);
    call->positions.push_back(i);
  }
  store_->decide(call->asked, cost,
                 [self = shared_from_this(), call, &descriptors, cost,
                  handler = std::move(handler)](std::error_code ec, RateDecision decision) {
                   self->on_leased_answer(*call, descriptors, cost, ec, std::move(decision),
                                          handler);
                 });
}

void LocalLayer::on_leased_answer(const LeasedCall& call,
                                  const std::vector<LimitDescriptor>& descriptors, double cost,
                                  std::error_code ec, RateDecision decision,
                                  const RateDecisionHandler& handler) {
  if (ec || !decision.allowed) put_back(descriptors, cost, call.from_lease);
  if (ec || decision.limits.size() != call.asked.size()) return handler(ec, std::move(decision));
  const std::int64_t now = now_us_();
  if (!decision.allowed) {
    remember_denials(call.asked, cost, decision, call.sent_us);
  } else {
    for (std::size_t j = 0; j < call.asked.size(); ++j) {
      const double granted = decision.limits[j].leased;
      if (!(granted > 0)) continue;
      // A lease that arrives after a reload or the drain emptied the table goes back.
      if (draining_ || !leases_.on_grant(call.asked[j], granted, decision.limits[j], now)) {
        give_back({BucketRefund{call.asked[j], granted}});
        continue;
      }
      metrics_.add("sluice_ratelimit_leases_total",
                   scratch_labels({{"limit", call.asked[j].limit}}));
    }
  }
  RateDecision full;
  full.allowed = decision.allowed;
  full.limits.resize(descriptors.size());
  for (std::size_t j = 0; j < call.positions.size(); ++j) {
    full.limits[call.positions[j]] = decision.limits[j];
  }
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    if (call.from_lease[i]) full.limits[i] = leases_.state(descriptors[i], cost, now);
  }
  handler({}, std::move(full));
}

void LocalLayer::remember_denials(std::span<const LimitDescriptor> asked, double cost,
                                  const RateDecision& decision, std::int64_t asked_at) {
  if (deny_cache_on_) cache_.remember(asked, cost, decision, asked_at);
}

void LocalLayer::put_back(const std::vector<LimitDescriptor>& descriptors, double cost,
                          const std::vector<std::uint8_t>& from_lease) {
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    if (from_lease[i]) leases_.put_back(descriptors[i], cost);
  }
}

void LocalLayer::answer_now(RateDecisionHandler handler, RateDecision decision) {
  boost::asio::post(executor_, [handler = std::move(handler), decision = std::move(decision)]() mutable {
    handler({}, std::move(decision));
  });
}

void LocalLayer::refund(std::vector<BucketRefund> refunds, RefundHandler done) {
  give_back(std::move(refunds), std::move(done));
}

void LocalLayer::give_back(std::vector<BucketRefund> refunds, RefundHandler done) {
  for (const auto& r : refunds) cache_.forget(r.bucket);
  store_->refund(std::move(refunds), std::move(done));
}

void LocalLayer::reconfigure(const LocalConfig& config) {
  deny_cache_on_ = config.deny_cache;
  cache_.clear();
  if (auto refunds = leases_.take_all(); !refunds.empty()) give_back(std::move(refunds));
}

void LocalLayer::drain(std::function<void()> done) {
  draining_ = true;
  sweep_timer_.cancel();
  cache_.clear();
  auto refunds = leases_.take_all();
  if (refunds.empty()) return boost::asio::post(executor_, std::move(done));
  give_back(std::move(refunds), [done = std::move(done)](std::error_code) { done(); });
}

// While the table holds anything, a sweep every lease window gives back the
// leases that expired and drops idle buckets.
void LocalLayer::arm_sweep() {
  if (sweep_armed_ || draining_ || leases_.size() == 0) return;
  sweep_armed_ = true;
  sweep_timer_.expires_after(std::chrono::microseconds(LeaseTable::kWindowUs));
  sweep_timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (!self) return;
    self->sweep_armed_ = false;
    if (!ec) self->sweep();
  });
}

void LocalLayer::sweep() {
  if (draining_) return;
  if (auto refunds = leases_.take_expired(now_us_()); !refunds.empty()) {
    give_back(std::move(refunds));
  }
  arm_sweep();
}

}  // namespace sluice
