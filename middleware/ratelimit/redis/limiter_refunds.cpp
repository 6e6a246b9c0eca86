// The Redis limiter's refunds (batched per turn of the loop on one Redis, per
// hash slot on a cluster) and its concurrency slots' renewals.
#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "common/spares.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/redis/refund_gather.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter_impl.hpp"

namespace sluice {

template <class Send>
void RedisRateLimiter::Impl::per_slot_group(const std::vector<std::string>& keys, bool by_slot,
                                            RefundHandler done, Send send) {
  auto pending = std::make_shared<RefundGather>(std::move(done));
  const auto counted = [pending](std::error_code ec) { pending->counted(ec); };
  if (!by_slot || keys.size() == 1 || common_slot(keys)) {
    std::vector<std::size_t> all(keys.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    pending->waiting = 1;
    return send(all, counted);
  }
  const auto groups = group_by_slot(keys);
  pending->waiting = groups.size();
  for (const auto& group : groups) send(group.indexes, counted);
}

void RedisRateLimiter::Impl::refund(std::vector<BucketRefund> refunds, RefundHandler done) {
  if (refunds.empty()) {
    if (done) boost::asio::post(executor_, [done = std::move(done)] { done({}); });
    return;
  }
  if (clients_.route().by_slot()) return send_refunds(std::move(refunds), std::move(done));
  const bool first = refund_batch_.empty();
  for (auto& r : refunds) refund_batch_.push_back(std::move(r));
  keep_spare(std::move(refunds));
  if (done) refund_waiters_.push_back(std::move(done));
  if (first) boost::asio::post(executor_, [self = shared_from_this()] { self->flush_refunds(); });
}

void RedisRateLimiter::Impl::flush_refunds() {
  // The lists of the next turn come from the spares, and these go back there.
  std::vector<BucketRefund> batch =
      std::exchange(refund_batch_, Spares<std::vector<BucketRefund>>::take());
  RefundHandler tell =
      [waiters = std::exchange(refund_waiters_, Spares<std::vector<RefundHandler>>::take())](
          std::error_code ec) mutable {
        for (const auto& waiter : waiters) waiter(ec);
        keep_spare(std::move(waiters));
      };
  // Every refund of the turn by the script (the usual case): one call, its
  // outcome every waiter's.
  if (std::none_of(batch.begin(), batch.end(), [](const BucketRefund& r) {
        return static_cast<bool>(algorithm_row(r.bucket).refund_command);
      })) {
    return send_refunds(std::move(batch), std::move(tell));
  }
  auto gather = std::make_shared<RefundGather>(std::move(tell));
  std::vector<BucketRefund> scripted;
  std::vector<std::vector<std::string>> commands;
  commands.reserve(batch.size());
  for (BucketRefund& r : batch) {
    const auto command = algorithm_row(r.bucket).refund_command;
    if (!command) {
      scripted.push_back(std::move(r));
      continue;
    }
    commands.push_back(command(redis_key(key_prefix_, r.bucket, KeyStyle::kPlain), r));
  }
  gather->waiting = commands.size() + (scripted.empty() ? 0 : 1);
  redis::Client& client = clients_.client();
  for (auto& command : commands) {
    client.command(std::move(command),
                   [self = shared_from_this(), gather](std::error_code ec, redis::Reply reply) {
                     // A value of another shape under the key: no slot there to give back.
                     if (ec && reply.is_error() && reply.str.starts_with("WRONGTYPE")) ec = {};
                     self->on_refund(ec);
                     gather->counted(ec);
                   });
  }
  if (!scripted.empty()) {
    send_refunds(std::move(scripted), [gather](std::error_code ec) { gather->counted(ec); });
  }
}

void RedisRateLimiter::Impl::send_refunds(std::vector<BucketRefund> refunds, RefundHandler done) {
  const ClientSwitch::Route route = clients_.route();
  std::vector<std::string> keys;
  keys.reserve(refunds.size());
  for (const auto& r : refunds) keys.push_back(redis_key(key_prefix_, r.bucket, route.keys));
  const CrossSlotContext context = cross_slot_context();
  if (!route.by_slot() || keys.size() == 1 || common_slot(keys)) {  // one call, the lists as they are
    return send_refund(context, std::move(keys), std::move(refunds),
                       [this, done = std::move(done)](std::error_code ec) {
                         on_refund(ec);
                         if (done) done(ec);
                       });
  }
  per_slot_group(keys, route.by_slot(), std::move(done),
                 [&](const std::vector<std::size_t>& indexes, auto counted) {
                   std::vector<std::string> group_keys;
                   std::vector<BucketRefund> group_refunds;
                   group_keys.reserve(indexes.size());
                   group_refunds.reserve(indexes.size());
                   for (const std::size_t i : indexes) {
                     group_keys.push_back(keys[i]);
                     group_refunds.push_back(refunds[i]);
                   }
                   send_refund(context, std::move(group_keys), std::move(group_refunds),
                               [this, counted](std::error_code ec) {
                                 on_refund(ec);
                                 counted(ec);
                               });
                 });
}

void RedisRateLimiter::Impl::renew(std::vector<LimitDescriptor> slots, RefundHandler done) {
  const ClientSwitch::Route route = clients_.route();
  redis::Client& client = route.client;
  if (slots.empty()) {
    if (done) boost::asio::post(executor_, [done = std::move(done)] { done({}); });
    return;
  }
  const std::vector<std::string> keys = redis_keys(key_prefix_, slots, route.keys);
  per_slot_group(keys, route.by_slot(), std::move(done),
                 [&](const std::vector<std::size_t>& indexes, auto counted) {
                   std::vector<std::string> group_keys;
                   std::vector<LimitDescriptor> group_slots;
                   for (const std::size_t i : indexes) {
                     group_keys.push_back(keys[i]);
                     group_slots.push_back(slots[i]);
                   }
                   client.evalsha(
                       renew_script_, std::move(group_keys), codec_.encode_renew_args(group_slots),
                       [self = shared_from_this(), counted](std::error_code ec, redis::Reply) {
                         if (ec) spdlog::debug("redis: renewing slots failed: {}", ec.message());
                         counted(ec);
                       });
                 });
}

void RedisRateLimiter::Impl::on_refund(std::error_code ec) {
  refunds_counted_.add(ec ? "error" : "ok");
  if (ec) spdlog::debug("redis: a refund failed: {}", ec.message());
}

}  // namespace sluice
