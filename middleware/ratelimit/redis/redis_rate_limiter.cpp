#include "middleware/ratelimit/redis/redis_rate_limiter_impl.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "middleware/ratelimit/algorithms/algorithm.hpp"

namespace sluice {

void RedisRateLimiter::Impl::decide(const std::vector<LimitDescriptor>& descriptors, double cost,
                                    RateDecisionHandler handler) {
  const ClientSwitch::Route route = clients_.route();
  redis::Client& client = route.client;
  const bool by_slot = route.by_slot();
  if (!by_slot) {
    if (const auto open = breaker_->refuse(client.is_ready(), CircuitBreaker::Clock::now())) {
      // Open breaker: no network time at all.
      RateDecision unavailable;
      unavailable.unavailable_seconds = *open;
      boost::asio::post(executor_, [handler = std::move(handler), unavailable]() mutable {
        handler(make_error_code(LimiterError::kCircuitOpen), std::move(unavailable));
      });
      return;
    }
  }
  if (descriptors.size() == 1 && DecisionBatcher::batchable(descriptors[0])) {
    // Its key is named when the batch goes, for the client in use then.
    const bool first =
        batcher_.enqueue(QueuedDecision{descriptors[0], std::string(), cost, std::move(handler)});
    if (first) boost::asio::post(executor_, [self = shared_from_this()] { self->flush_batch(); });
    return;
  }
  auto keys = redis_keys(key_prefix_, descriptors, route.keys);
  if (by_slot && descriptors.size() > 1 && !common_slot(keys)) {
    return decide_across_slots(cross_slot_context(), descriptors, std::move(keys), cost,
                               [self = shared_from_this(), handler = std::move(handler)](
                                   std::error_code ec, RateDecision&& decision) {
                                 self->on_outcome(ec, std::move(decision), handler);
                               });
  }
  client.evalsha_late(
      script_, std::move(keys), codec_.encode_args(descriptors, cost),
      [self = shared_from_this(), count = descriptors.size(), handler = std::move(handler)](
          std::error_code ec, redis::Reply reply) {
        self->on_reply(ec, std::move(reply), count, handler);
      },
      late_handler());
}

const std::shared_ptr<const redis::Client::LateReplyHandler>&
RedisRateLimiter::Impl::late_handler() {
  if (!late_) {
    late_ = std::make_shared<const redis::Client::LateReplyHandler>(
        [weak = weak_from_this()](const std::vector<std::string>& keys,
                                  const std::vector<std::string>& args, redis::Reply reply) {
          if (auto self = weak.lock()) self->undo_late(keys, args, reply);
        });
  }
  return late_;
}

void RedisRateLimiter::Impl::undo_late(const std::vector<std::string>& keys,
                                       const std::vector<std::string>& args,
                                       const redis::Reply& reply) {
  std::vector<RateDecision> decisions;
  if (LimitsCodec::is_node_batch(args)) {
    const std::size_t n = LimitsCodec::node_batch_keys(args).size();
    if (auto batch = decode_node_batch_reply(codec_, reply, n)) {
      // A request the node did not decide took nothing.
      RateDecision undecided;
      undecided.limits.resize(1);
      for (auto& decision : *batch) decisions.push_back(decision ? std::move(*decision) : undecided);
    }
  } else if (LimitsCodec::is_batch(args)) {
    auto batch = decode_batch_reply(codec_, reply, keys.size());
    if (batch) decisions = std::move(*batch);
  } else if (auto one = decode_script_reply(codec_, reply, keys.size())) {
    decisions.push_back(std::move(*one));
  }
  LimitsCodec::UndoCall undo = codec_.undo_call(keys, args, decisions);
  if (undo.keys.empty()) return;
  metrics_.add("sluice_ratelimit_late_decisions_undone_total", "",
               static_cast<double>(undo.requests));
  const ClientSwitch::Route route = clients_.route();
  const auto refunded = [self = shared_from_this()](std::error_code ec, redis::Reply) {
    self->on_refund(ec);
  };
  if (!route.by_slot() || common_slot(undo.keys)) {
    return route.client.evalsha(refund_script_, std::move(undo.keys), std::move(undo.args),
                                refunded);
  }
  // A node batch's keys are in several slots: a refund call per slot.
  for (const SlotGroup& group : group_by_slot(undo.keys)) {
    LimitsCodec::UndoCall part = LimitsCodec::undo_part(undo, group.indexes);
    route.client.evalsha(refund_script_, std::move(part.keys), std::move(part.args), refunded);
  }
}

void RedisRateLimiter::Impl::flush_batch() {
  std::vector<QueuedDecision> batch = batcher_.take();
  if (batch.empty()) return;
  const ClientSwitch::Route route = clients_.route();
  redis::Client& client = route.client;
  for (QueuedDecision& queued : batch) queued.key = redis_key(key_prefix_, queued.bucket, route.keys);
  const auto outcome = [this](std::error_code ec, RateDecision&& decision,
                              const RateDecisionHandler& handler) {
    on_outcome(ec, std::move(decision), handler);
  };
  if (route.by_slot()) {
    send_node_batches(
        client, script_, codec_, batch, shared_from_this(), outcome,
        [self = shared_from_this()](QueuedDecision alone) {
          // Not decided by the node the batch went to (its slot moved): on its
          // own, routed (and redirected) by its key.
          self->decide_alone(std::move(alone));
        },
        late_handler());
    return batcher_.recycle(std::move(batch));
  }
  constexpr std::size_t kMax = DecisionBatcher::kMaxBatch;
  for (std::size_t first = 0; first < batch.size(); first += kMax) {
    send_batch(
        client, script_, codec_,
        std::span<QueuedDecision>(batch).subspan(first, std::min(kMax, batch.size() - first)),
        shared_from_this(), outcome, late_handler());
  }
  batcher_.recycle(std::move(batch));
}

void RedisRateLimiter::Impl::decide_alone(QueuedDecision queued) {
  const ClientSwitch::Route route = clients_.route();
  if (!route.by_slot()) {
    // A reload replaced the cluster since: decided as any request there.
    return decide({queued.bucket}, queued.cost, std::move(queued.handler));
  }
  queued.key = redis_key(key_prefix_, queued.bucket, route.keys);
  route.client.evalsha_late(
      script_, {std::move(queued.key)}, codec_.encode_args({&queued.bucket, 1}, queued.cost),
      [self = shared_from_this(), handler = std::move(queued.handler)](std::error_code ec,
                                                                       redis::Reply reply) {
        self->on_reply(ec, std::move(reply), 1, handler);
      },
      late_handler());
}

CrossSlotContext RedisRateLimiter::Impl::cross_slot_context() {
  return CrossSlotContext{clients_.client(),
                          script_,
                          refund_script_,
                          codec_,
                          shared_from_this(),
                          [weak = weak_from_this()](std::error_code ec) {
                            if (auto self = weak.lock()) self->on_refund(ec);
                          },
                          late_handler()};
}

void RedisRateLimiter::Impl::on_reply(std::error_code ec, redis::Reply reply, std::size_t count,
                                      const RateDecisionHandler& handler) {
  std::optional<RateDecision> decision;
  if (!ec) {
    decision = decode_script_reply(codec_, reply, count);
    if (!decision) ec = make_error_code(LimiterError::kBadReply);
  }
  on_outcome(ec, decision ? std::move(*decision) : RateDecision{}, handler);
}

void RedisRateLimiter::Impl::on_outcome(std::error_code ec, RateDecision&& decision,
                                        const RateDecisionHandler& handler) {
  const auto now = CircuitBreaker::Clock::now();
  if (ec) {
    const auto kind = ec == make_error_code(LimiterError::kBadReply) ? std::string_view{"protocol"}
                                                                     : redis::error_kind(ec);
    metrics_.add("sluice_redis_errors_total", scratch_labels({{"kind", kind}}));
    RateDecision unavailable;
    if (uses_breaker()) unavailable.unavailable_seconds = breaker_->on_failure(ec, now);
    return handler(ec, std::move(unavailable));
  }
  if (uses_breaker()) breaker_->on_success(now);
  handler({}, std::move(decision));
}

void RedisRateLimiter::Impl::fleet_heartbeat(const std::string& instance_id,
                                             std::chrono::milliseconds ttl, bool leave,
                                             FleetHandler handler) {
  clients_.client().evalsha(fleet_script_, {key_prefix_ + "fleet"},
                            {instance_id, std::to_string(ttl.count()), leave ? "1" : "0"},
                            [handler = std::move(handler)](std::error_code ec, redis::Reply reply) {
                              if (!ec && reply.type != redis::Reply::Type::kInteger) {
                                ec = make_error_code(LimiterError::kBadReply);
                              }
                              const bool said = ec && reply.is_error();
                              handler(ec, ec ? 0 : reply.integer,
                                      said ? reply.str : std::string_view{});
                            });
}

void RedisRateLimiter::Impl::inspect(const LimitDescriptor& bucket, BucketViewHandler handler) {
  const ClientSwitch::Route route = clients_.route();
  read_bucket(route.client, route.keys, read_script_, key_prefix_, bucket, std::move(handler));
}

void RedisRateLimiter::Impl::reset(const LimitDescriptor& bucket, RefundHandler done) {
  const ClientSwitch::Route route = clients_.route();
  reset_bucket(route.client, route.keys, reset_script_, key_prefix_, bucket, std::move(done));
}

void RedisRateLimiter::Impl::reconfigure(const RedisConfig& config) {
  breaker_->reconfigure(config.circuit_breaker.failures, config.circuit_breaker.open);
  key_prefix_ = config.key_prefix;
  codec_.set_deadline_after(script_deadline_after(config.timeout));
  clients_.reconfigure(redis_options(config));
}

void RedisRateLimiter::Impl::export_metrics() {
  redis::Client& client = clients_.client();
  const redis::Stats stats = clients_.stats();
  const auto count = [](std::uint64_t n) { return static_cast<double>(n); };
  metrics_.set("sluice_redis_commands_total", "", count(stats.commands_sent));
  metrics_.set("sluice_redis_writes_total", "", count(stats.writes));
  metrics_.set("sluice_redis_late_replies_total", "", count(stats.late_replies));
  metrics_.set("sluice_redis_redirects_total", scratch_labels({{"kind", "moved"}}),
               count(stats.redirects_moved));
  metrics_.set("sluice_redis_redirects_total", scratch_labels({{"kind", "ask"}}),
               count(stats.redirects_ask));
  metrics_.set("sluice_redis_topology_refresh_total", scratch_labels({{"result", "ok"}}),
               count(stats.topology_refresh_ok));
  metrics_.set("sluice_redis_topology_refresh_total", scratch_labels({{"result", "error"}}),
               count(stats.topology_refresh_error));
  metrics_.set("sluice_redis_up", "", client.is_ready() ? 1 : 0);
  metrics_.set("sluice_redis_circuit_open", "", breaker_->open() ? 1 : 0);
}

RedisRateLimiter::RedisRateLimiter(boost::asio::any_io_executor executor, const RedisConfig& config,
                                   MetricsShard& metrics, std::unique_ptr<redis::Client> client,
                                   redis::ClientFactory make_client)
    : impl_(std::make_shared<Impl>(std::move(executor), config, metrics, std::move(client),
                                   std::move(make_client))) {}

RedisRateLimiter::~RedisRateLimiter() {
  impl_->close();
}

void RedisRateLimiter::decide(const std::vector<LimitDescriptor>& descriptors, double cost,
                              RateDecisionHandler handler) {
  impl_->decide(descriptors, cost, std::move(handler));
}

void RedisRateLimiter::refund(std::vector<BucketRefund> refunds, RefundHandler done) {
  impl_->refund(std::move(refunds), std::move(done));
}

// Asks the client switch as refund() does, so a reload's new client is the
// one answered for.
bool RedisRateLimiter::refunds_together() const {
  return !impl_->clients_.route().by_slot();
}

void RedisRateLimiter::renew(std::vector<LimitDescriptor> slots, RefundHandler done) {
  impl_->renew(std::move(slots), std::move(done));
}

void RedisRateLimiter::inspect(const LimitDescriptor& bucket, BucketViewHandler handler) {
  impl_->inspect(bucket, std::move(handler));
}

void RedisRateLimiter::reset(const LimitDescriptor& bucket, RefundHandler done) {
  impl_->reset(bucket, std::move(done));
}

void RedisRateLimiter::fleet_heartbeat(const std::string& instance_id,
                                       std::chrono::milliseconds ttl, bool leave,
                                       FleetHandler handler) {
  impl_->fleet_heartbeat(instance_id, ttl, leave, std::move(handler));
}

void RedisRateLimiter::reconfigure(const RedisConfig& config) {
  impl_->reconfigure(config);
}
void RedisRateLimiter::export_metrics() {
  impl_->export_metrics();
}
std::vector<redis::NodeStatus> RedisRateLimiter::nodes() const {
  return impl_->nodes();
}
std::string RedisRateLimiter::last_error_message() const {
  return impl_->clients_.installed().last_error_message();
}
bool RedisRateLimiter::redis_ready() const {
  return impl_->clients_.current().is_ready();
}
bool RedisRateLimiter::circuit_open() const {
  return impl_->breaker_->open();
}
void RedisRateLimiter::close() {
  impl_->close();
}
void RedisRateLimiter::connect() {
  impl_->connect_now();
}

}  // namespace sluice
