#include "middleware/ratelimit/local/local_layer.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <system_error>

#include <boost/asio/post.hpp>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"

namespace sluice {

std::int64_t steady_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

LocalLayer::LocalLayer(boost::asio::any_io_executor executor, std::shared_ptr<RateLimiter> store,
                       MetricsShard& metrics, const LocalConfig& config, Clock now_us, Freed freed)
    : executor_(std::move(executor)),
      store_(std::move(store)),
      metrics_(metrics),
      now_us_(std::move(now_us)),
      freed_(std::move(freed)),
      deny_cache_on_(config.deny_cache),
      sweep_timer_(executor_) {}

void LocalLayer::decide(const std::vector<LimitDescriptor>& descriptors, double cost,
                        RateDecisionHandler handler) {
  if (auto decision = decide_or_wait(descriptors, cost, handler)) {
    answer_now(std::move(handler), std::move(*decision));
  }
}

std::optional<RateDecision> LocalLayer::decide_or_wait(
    const std::vector<LimitDescriptor>& descriptors, double cost, RateDecisionHandler& handler) {
  if (draining_) {
    store_->decide(descriptors, cost, std::move(handler));
    return std::nullopt;
  }
  const std::int64_t now = now_us_();
  const bool leased = std::any_of(descriptors.begin(), descriptors.end(),
                                  [](const LimitDescriptor& d) { return d.lease_tokens > 0; });
  if (leased) return decide_with_leases(descriptors, cost, now, handler);
  if (auto denial = cached_denial(descriptors, cost, now, {})) return denial;
  if (!deny_cache_on_) {
    store_->decide(descriptors, cost, std::move(handler));
    return std::nullopt;
  }
  std::unique_ptr<StoreCall> call = store_calls_.take();
  *call = StoreCall{&descriptors, cost, now, std::move(handler)};
  store_->decide(descriptors, cost,
                 [self = shared_from_this(), call = std::move(call)](
                     std::error_code ec, RateDecision&& decision) mutable {
                   self->on_store_answer(std::move(call), ec, std::move(decision));
                 });
  return std::nullopt;
}

void LocalLayer::on_store_answer(std::unique_ptr<StoreCall> call, std::error_code ec,
                                 RateDecision&& decision) {
  if (!ec && !decision.allowed) {
    remember_denials(*call->descriptors, call->cost, decision, call->asked_at);
  }
  RateDecisionHandler handler = std::move(call->handler);
  store_calls_.give_back(std::move(call));
  handler(ec, std::move(decision));
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

void LocalLayer::remember_denials(std::span<const LimitDescriptor> asked, double cost,
                                  const RateDecision& decision, std::int64_t asked_at) {
  if (!deny_cache_on_) return;
  if (!reset_at_.empty() || refunded_) {
    for (const auto& bucket : asked) {
      // An answer from before a reset of one of them, or a refund to one.
      if (sent_before(reset_at_, bucket, asked_at) ||
          (refunded_ && asked_at <= refunded_at_[refund_slot(bucket)])) {
        return;
      }
    }
  }
  cache_.remember(asked, cost, decision, asked_at);
  arm_sweep();  // the cache's entries leave once they run out
}

void LocalLayer::answer_now(RateDecisionHandler handler, RateDecision decision) {
  boost::asio::post(executor_,
                    [handler = std::move(handler), decision = std::move(decision)]() mutable {
                      handler({}, std::move(decision));
                    });
}

void LocalLayer::refund(std::vector<BucketRefund> refunds, RefundHandler done) {
  give_back(std::move(refunds), std::move(done));
}

void LocalLayer::renew(std::vector<LimitDescriptor> slots, RefundHandler done) {
  store_->renew(std::move(slots), std::move(done));
}

void LocalLayer::give_back(std::vector<BucketRefund> refunds, RefundHandler done) {
  for (const auto& r : refunds) cache_.forget(r.bucket);
  if (deny_cache_on_) {
    // A denial still on its way was answered before these tokens came back.
    const std::int64_t now = now_us_();
    for (const auto& r : refunds) {
      if (r.tokens > 0 && algorithm_row(r.bucket).caches_denials) {
        refunded_at_[refund_slot(r.bucket)] = now;
        refunded_ = true;
      }
    }
  }
  ++calls_out_;
  store_->refund(std::move(refunds),
                 [self = shared_from_this(), done = std::move(done)](std::error_code ec) {
                   --self->calls_out_;
                   if (done) done(ec);
                   self->finish_drain_when_idle();
                 });
}

void LocalLayer::inspect(const LimitDescriptor& bucket, BucketViewHandler handler) {
  store_->inspect(bucket, std::move(handler));
}

// The bucket is forgotten here once the store has reset it: on this worker's
// connection every answer to a call sent before the reset came first.
void LocalLayer::reset(const LimitDescriptor& bucket, RefundHandler done) {
  store_->reset(bucket,
                [self = shared_from_this(), bucket, done = std::move(done)](std::error_code ec) {
                  if (!ec) self->forget(bucket);
                  if (done) done(ec);
                });
}

void LocalLayer::forget(const LimitDescriptor& bucket) {
  cache_.forget(bucket);
  leases_.forget(bucket);
  // Answers to calls sent before now describe the bucket before its reset:
  // their denials are not cached and their leases go back (see sent_before()).
  const std::int64_t now = now_us_();
  std::erase_if(reset_at_, [now](const auto& entry) { return now - entry.second > kFenceUs; });
  reset_at_[BucketKey::of(bucket)] = now;
}

std::size_t LocalLayer::refund_slot(const LimitDescriptor& bucket) {
  // The key hash is uniform: its first bytes pick the slot.
  std::uint64_t word = 0;
  std::memcpy(&word, bucket.key_hash.data(), sizeof word);
  return static_cast<std::size_t>(word % kRefundSlots);
}

bool LocalLayer::sent_before(const FenceTimes& times, const LimitDescriptor& bucket,
                             std::int64_t sent_us) {
  if (times.empty()) return false;
  const auto it = times.find(BucketKey::of(bucket));
  return it != times.end() && sent_us <= it->second;
}

void LocalLayer::reconfigure(const LocalConfig& config) {
  deny_cache_on_ = config.deny_cache;
  cache_.clear();
  refunded_at_.fill(0);
  refunded_ = false;
  if (auto refunds = leases_.take_all(); !refunds.empty()) give_back(std::move(refunds));
}

void LocalLayer::drain(std::function<void()> done) {
  draining_ = true;
  drained_ = std::move(done);
  sweep_timer_.cancel();
  cache_.clear();
  auto waiting = std::move(waiters_);
  waiters_.clear();
  for (auto& [bucket, queue] : waiting) {
    for (Waiter& w : queue) store_->decide(*w.descriptors, w.cost, std::move(w.handler));
  }
  if (auto refunds = leases_.take_all(); !refunds.empty()) give_back(std::move(refunds));
  if (calls_out_ == 0)
    boost::asio::post(executor_, [self = shared_from_this()] { self->finish_drain_when_idle(); });
}

// The drain ends once no call that may carry or return leased tokens is out:
// the last refund has been answered (or failed).
void LocalLayer::finish_drain_when_idle() {
  if (!draining_ || calls_out_ != 0 || !drained_) return;
  auto done = std::move(drained_);
  drained_ = nullptr;
  done();
}

// While either table holds anything, a sweep every lease window gives back
// the leases that expired and drops idle buckets, and once a second drops the
// denials that ran out.
void LocalLayer::arm_sweep() {
  if (sweep_armed_ || draining_ || (leases_.size() == 0 && cache_.size() == 0)) return;
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
  const std::int64_t now = now_us_();
  if (auto refunds = leases_.take_expired(now); !refunds.empty()) {
    give_back(std::move(refunds));
  }
  if (cache_.size() > 0 && now - cache_purged_us_ >= DenyCache::kMaxEntryUs) {
    cache_purged_us_ = now;
    const std::size_t gone = cache_.purge_expired(now);
    if (gone > 0 && freed_) freed_(gone * DenyCache::kEntryBytes);
  }
  arm_sweep();
}

}  // namespace sluice
