// LocalLayer: the lease path. A request whose buckets hold leased tokens is
// answered from them at once; the buckets without tokens go to the store,
// asking for a lease of their own, and requests of a bucket whose lease is
// being asked for wait for that answer. The rest of the layer is in
// local_layer.cpp.
#include "middleware/ratelimit/local/local_layer.hpp"

#include <memory>
#include <optional>
#include <system_error>
#include <vector>

#include "common/spares.hpp"
#include "gateway/metrics.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"

namespace sluice {

// The buckets of a request that needs the store while some of its buckets are
// leased: which were served from leases, and what was asked of the store.
struct LocalLayer::LeasedCall {
  std::vector<std::uint8_t> from_lease;  // per descriptor: 1 = spent from its lease
  std::vector<LimitDescriptor> asked;    // the others, with the lease they ask for
  std::vector<std::size_t> positions;    // asked[j] is descriptors[positions[j]]
  std::int64_t sent_us = 0;

  ~LeasedCall() { keep_spare(std::move(from_lease)); }  // a thread's spare (below)
};

std::optional<RateDecision> LocalLayer::decide_with_leases(
    const std::vector<LimitDescriptor>& descriptors, double cost, std::int64_t now,
    RateDecisionHandler& handler, bool may_wait) {
  // Which descriptors a lease covered; a call's record is made only when the
  // store is asked (a lease answers most requests at once, and then nothing
  // is allocated: the list is the thread's spare).
  std::vector<std::uint8_t> from_lease = Spares<std::vector<std::uint8_t>>::take();
  from_lease.assign(descriptors.size(), 0);
  bool all_leased = true;
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    const LimitDescriptor& d = descriptors[i];
    if (d.lease_tokens > 0 && leases_.try_spend(d, cost, now)) {
      from_lease[i] = 1;
    } else {
      all_leased = false;
    }
  }
  arm_sweep();  // the table now knows these buckets
  if (auto denial = cached_denial(descriptors, cost, now, from_lease)) {
    put_back(descriptors, cost, from_lease);
    keep_spare(std::move(from_lease));
    return denial;
  }
  if (may_wait && descriptors.size() == 1 && !from_lease[0] && leases_.asking(descriptors[0])) {
    auto& queue = waiters_[BucketKey::of(descriptors[0])];
    if (queue.size() < kMaxWaiters) {
      queue.push_back(Waiter{&descriptors, cost, std::move(handler)});
      keep_spare(std::move(from_lease));
      return std::nullopt;
    }
  }
  // Served from a lease that is running low: top it up in the background,
  // while its rest covers the requests that come meanwhile.
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    if (!from_lease[i]) continue;
    if (const double tokens = leases_.top_up(descriptors[i], cost); tokens > 0) {
      send_top_up(descriptors[i], tokens);
    }
  }
  if (all_leased) {
    keep_spare(std::move(from_lease));
    RateDecision decision;
    decision.allowed = true;
    decision.local = LocalDecision::kLease;
    decision.limits.reserve(descriptors.size());
    for (const auto& d : descriptors) decision.limits.push_back(leases_.state(d, cost, now));
    return decision;
  }
  auto call = std::make_shared<LeasedCall>();
  call->sent_us = now;
  call->from_lease = std::move(from_lease);
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    if (call->from_lease[i]) continue;
    LimitDescriptor& asked = call->asked.emplace_back(descriptors[i]);
    if (asked.lease_tokens > 0) asked.lease_want = leases_.ask(asked, cost);
    call->positions.push_back(i);
  }
  ++calls_out_;
  store_->decide(call->asked, cost,
                 [self = shared_from_this(), call, &descriptors, cost,
                  handler = std::move(handler)](std::error_code ec, RateDecision&& decision) {
                   --self->calls_out_;
                   self->on_leased_answer(*call, descriptors, cost, ec, std::move(decision),
                                          handler);
                   self->finish_drain_when_idle();
                 });
  return std::nullopt;
}

void LocalLayer::on_leased_answer(const LeasedCall& call,
                                  const std::vector<LimitDescriptor>& descriptors, double cost,
                                  std::error_code ec, RateDecision decision,
                                  const RateDecisionHandler& handler) {
  if (!ec && decision.limits.size() != call.asked.size()) {
    ec = std::make_error_code(std::errc::bad_message);  // never from a sane store
    decision = RateDecision{};
  }
  if (ec || !decision.allowed) put_back(descriptors, cost, call.from_lease);
  // The denial first: the waiters that taking the leases releases see it.
  if (!ec && !decision.allowed) remember_denials(call.asked, cost, decision, call.sent_us);
  take_leases(call.asked, ec, decision, call.sent_us);
  if (ec) return handler(ec, std::move(decision));
  const std::int64_t now = now_us_();
  RateDecision full;
  full.allowed = decision.allowed;
  full.delay_seconds = decision.delay_seconds;
  full.limits.resize(descriptors.size());
  for (std::size_t j = 0; j < call.positions.size(); ++j) {
    full.limits[call.positions[j]] = decision.limits[j];
  }
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    if (call.from_lease[i]) full.limits[i] = leases_.state(descriptors[i], cost, now);
  }
  handler({}, std::move(full));
}

void LocalLayer::take_leases(std::span<const LimitDescriptor> asked, std::error_code ec,
                             const RateDecision& decision, std::int64_t sent_us) {
  const bool answered = !ec && decision.limits.size() == asked.size();
  for (std::size_t j = 0; j < asked.size(); ++j) {
    if (!(asked[j].lease_want > 0)) continue;
    const double granted = answered && decision.allowed ? decision.limits[j].leased : 0;
    if (!(granted > 0)) {
      leases_.answered(asked[j]);
      release_waiters(asked[j], false);
      continue;
    }
    // A lease that arrives after a reload, a reset or the drain emptied the
    // table goes back.
    if (draining_ || sent_before(reset_at_, asked[j], sent_us) ||
        !leases_.on_grant(asked[j], granted, decision.limits[j], sent_us)) {
      give_back({BucketRefund{asked[j], granted}});
      release_waiters(asked[j], false);
      continue;
    }
    metrics_.add("sluice_ratelimit_leases_total", scratch_labels({{"limit", asked[j].limit}}));
    release_waiters(asked[j], true);
  }
}

void LocalLayer::release_waiters(const LimitDescriptor& bucket, bool granted) {
  if (waiters_.empty()) return;
  auto it = waiters_.find(BucketKey::of(bucket));
  if (it == waiters_.end()) return;
  std::vector<Waiter> queue = std::move(it->second);
  waiters_.erase(it);
  const std::int64_t now = now_us_();
  for (Waiter& w : queue) {
    if (draining_) {
      store_->decide(*w.descriptors, w.cost, std::move(w.handler));
    } else {
      // Posted, as decide() would: the waiters' handlers run after this one.
      if (auto decision = decide_with_leases(*w.descriptors, w.cost, now, w.handler, granted)) {
        answer_now(std::move(w.handler), std::move(*decision));
      }
    }
  }
}

// A call that decides no request (cost 0) and only takes a lease.
void LocalLayer::send_top_up(const LimitDescriptor& bucket, double tokens) {
  auto asked = std::make_shared<std::vector<LimitDescriptor>>(1, bucket);
  (*asked)[0].lease_want = tokens;
  ++calls_out_;
  store_->decide(*asked, 0,
                 [self = shared_from_this(), asked, sent = now_us_()](std::error_code ec,
                                                                      RateDecision decision) {
                   --self->calls_out_;
                   self->take_leases(*asked, ec, decision, sent);
                   self->finish_drain_when_idle();
                 });
}

void LocalLayer::put_back(const std::vector<LimitDescriptor>& descriptors, double cost,
                          const std::vector<std::uint8_t>& from_lease) {
  std::vector<BucketRefund> gone;  // leases a reload or the drain took meanwhile
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    if (from_lease[i] && !leases_.put_back(descriptors[i], cost)) {
      gone.push_back(BucketRefund{descriptors[i], cost});
    }
  }
  if (!gone.empty()) give_back(std::move(gone));
}

}  // namespace sluice
