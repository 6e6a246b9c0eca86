#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"

#include <chrono>
#include <span>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/algorithms/limits_codec.hpp"
#include "middleware/ratelimit/circuit_breaker.hpp"
#include "middleware/ratelimit/redis/breaker_probe.hpp"
#include "middleware/ratelimit/redis/bucket_admin.hpp"
#include "middleware/ratelimit/redis/client_switch.hpp"
#include "middleware/ratelimit/redis/cross_slot_call.hpp"
#include "middleware/ratelimit/redis/decision_batcher.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"
#include "middleware/ratelimit/redis/script_reply.hpp"
#include "middleware/ratelimit/redis/slot_plan.hpp"

namespace sluice {
namespace {

class LimiterCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "sluice.limiter"; }
  std::string message(int ev) const override {
    switch (static_cast<LimiterError>(ev)) {
      case LimiterError::kCircuitOpen:
        return "redis circuit breaker open";
      case LimiterError::kBadReply:
        return "unexpected rate-limit script reply";
    }
    return "limiter error";
  }
};

}  // namespace

redis::Options redis_options(const RedisConfig& c) {
  redis::Options o;
  o.host = c.host;
  o.port = c.port;
  o.user = c.user;
  o.password = c.password;
  o.db = c.db;
  o.tls = c.tls;
  o.ca_file = c.tls_ca_file;
  o.cert_file = c.tls_cert_file;
  o.key_file = c.tls_key_file;
  o.server_name = c.tls_server_name;
  o.connect_timeout = c.connect_timeout;
  o.command_timeout = c.timeout;
  switch (c.topology) {
    case RedisConfig::Topology::kStandalone:
      o.topology = redis::Topology::kStandalone;
      break;
    case RedisConfig::Topology::kSentinel:
      o.topology = redis::Topology::kSentinel;
      break;
    case RedisConfig::Topology::kCluster:
      o.topology = redis::Topology::kCluster;
      break;
  }
  for (const auto& node : c.nodes) o.nodes.push_back(redis::Endpoint{node.host, node.port});
  o.sentinel_master = c.sentinel_master;
  o.sentinel_user = c.sentinel_username;
  o.sentinel_password = c.sentinel_password;
  return o;
}

std::error_code make_error_code(LimiterError e) noexcept {
  static const LimiterCategory category;
  return {static_cast<int>(e), category};
}

bool never_reached_redis(std::error_code ec) noexcept {
  using redis::Error;
  return ec == make_error_code(LimiterError::kCircuitOpen) || ec == Error::kNotConnected ||
         ec == Error::kConnect || ec == Error::kTls || ec == Error::kAuth;
}

std::chrono::microseconds script_deadline_after(std::chrono::milliseconds timeout) {
  // A fifth of the timeout (10 ms of the default 50) is left for the answer
  // to travel back and for the error of the estimate of Redis' time.
  const std::chrono::microseconds t = timeout;
  return t - t / 5;
}

class RedisRateLimiter::Impl : public std::enable_shared_from_this<Impl> {
  // The outcome of a refund sent as several calls: `done` (may be empty) gets
  // the first error once each of the `waiting` calls has been counted.
  struct RefundGather {
    explicit RefundGather(RefundHandler on_done) : done(std::move(on_done)) {}
    void counted(std::error_code ec) {
      if (ec && !first_error) first_error = ec;
      if (--waiting == 0 && done) done(first_error);
    }
    std::size_t waiting = 0;
    std::error_code first_error;
    RefundHandler done;
  };

 public:
  Impl(boost::asio::any_io_executor executor, const RedisConfig& config, MetricsShard& metrics,
       std::unique_ptr<redis::Client> client, redis::ClientFactory make_client)
      : executor_(std::move(executor)),
        metrics_(metrics),
        script_(std::string{codec_.script()}),
        refund_script_(std::string{codec_.refund_script()}),
        fleet_script_(std::string{kFleetHeartbeatScript}),
        read_script_(std::string{kBucketReadScript}),
        reset_script_(std::string{kBucketResetScript}),
        renew_script_(std::string{codec_.renew_script()}),
        key_prefix_(config.key_prefix),
        clients_(executor_, std::move(client), std::move(make_client),
                 {&script_, &refund_script_, &fleet_script_, &read_script_, &reset_script_,
                  &renew_script_}),
        breaker_(std::make_shared<BreakerProbe>(executor_, clients_, metrics,
                                                config.circuit_breaker.failures,
                                                config.circuit_breaker.open)) {
    codec_.set_deadline_after(script_deadline_after(config.timeout));
  }

  // Connect now rather than on the first decision (which would then fail open).
  void connect_now() { clients_.installed().connect({}); }

  // On a Redis Cluster the breaker stays closed: a dead node fails only the
  // requests whose slots it owned (its client fails them at once), and one
  // breaker for the whole cluster would fail every other slot with them.
  bool uses_breaker() const { return !clients_.installed().routes_by_slot(); }

  void decide(const std::vector<LimitDescriptor>& descriptors, double cost,
              RateDecisionHandler handler) {
    redis::Client& client = clients_.client();
    const bool by_slot = client.routes_by_slot();
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
    auto keys =
        redis_keys(key_prefix_, descriptors, by_slot ? KeyStyle::kHashTag : KeyStyle::kPlain);
    if (by_slot && descriptors.size() > 1 && !common_slot(keys)) {
      return decide_across_slots(cross_slot_context(), descriptors, std::move(keys), cost,
                                 [self = shared_from_this(), handler = std::move(handler)](
                                     std::error_code ec, RateDecision decision) {
                                   self->on_outcome(ec, std::move(decision), handler);
                                 });
    }
    if (!by_slot && descriptors.size() == 1 && DecisionBatcher::batchable(descriptors[0])) {
      const bool first = batcher_.enqueue(
          QueuedDecision{descriptors[0], std::move(keys[0]), cost, std::move(handler)});
      if (first) boost::asio::post(executor_, [self = shared_from_this()] { self->flush_batch(); });
      return;
    }
    client.evalsha_late(
        script_, std::move(keys), codec_.encode_args(descriptors, cost),
        [self = shared_from_this(), count = descriptors.size(), handler = std::move(handler)](
            std::error_code ec, redis::Reply reply) {
          self->on_reply(ec, std::move(reply), count, handler);
        },
        late_handler());
  }

  // A decision call answered after the limiter stopped waiting: Redis ran it
  // after all (it was admitted before its deadline, but its answer was held
  // back: Redis writes replies after the commands of its whole pass). The
  // request was answered without it (fail open, closed or local), so what it
  // took belongs to nobody: it is given back at once.
  const std::shared_ptr<const redis::Client::LateReplyHandler>& late_handler() {
    if (!late_) {
      late_ = std::make_shared<const redis::Client::LateReplyHandler>(
          [weak = weak_from_this()](const std::vector<std::string>& keys,
                                    const std::vector<std::string>& args, redis::Reply reply) {
            if (auto self = weak.lock()) self->undo_late(keys, args, reply);
          });
    }
    return late_;
  }

  void undo_late(const std::vector<std::string>& keys, const std::vector<std::string>& args,
                 const redis::Reply& reply) {
    std::vector<RateDecision> decisions;
    if (!args.empty() && args[0].empty()) {
      auto batch = decode_batch_reply(codec_, reply, keys.size());
      if (batch) decisions = std::move(*batch);
    } else if (auto one = decode_script_reply(codec_, reply, keys.size())) {
      decisions.push_back(std::move(*one));
    }
    LimitsCodec::UndoCall undo = codec_.undo_call(keys, args, decisions);
    if (undo.keys.empty()) return;
    metrics_.add("sluice_ratelimit_late_decisions_undone_total", "",
                 static_cast<double>(undo.requests));
    clients_.client().evalsha(
        refund_script_, std::move(undo.keys), std::move(undo.args),
        [self = shared_from_this()](std::error_code ec, redis::Reply) { self->on_refund(ec); });
  }

  void flush_batch() {
    std::vector<QueuedDecision> batch = batcher_.take();
    if (batch.empty()) return;
    redis::Client& client = clients_.client();
    if (client.routes_by_slot()) {
      // A reload installed a cluster client since these were queued: each goes
      // its own way, with the cluster's keys.
      for (QueuedDecision& queued : batch) {
        decide({queued.bucket}, queued.cost, std::move(queued.handler));
      }
      return;
    }
    const auto outcome = [this](std::error_code ec, RateDecision decision,
                                const RateDecisionHandler& handler) {
      on_outcome(ec, std::move(decision), handler);
    };
    constexpr std::size_t kMax = DecisionBatcher::kMaxBatch;
    for (std::size_t first = 0; first < batch.size(); first += kMax) {
      send_batch(
          client, script_, codec_,
          std::span<QueuedDecision>(batch).subspan(first, std::min(kMax, batch.size() - first)),
          shared_from_this(), outcome, late_handler());
    }
  }

  CrossSlotContext cross_slot_context() {
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

  // Calls send(indexes, counted) once per group of `keys` that share a hash
  // slot (one group in all on a single Redis); `done` (may be empty) gets the
  // first error once every call has told `counted` its outcome.
  template <class Send>
  void per_slot_group(const std::vector<std::string>& keys, bool by_slot, RefundHandler done,
                      Send send) {
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

  std::vector<std::string> keys_of(std::span<const LimitDescriptor> buckets, bool by_slot) const {
    return redis_keys(key_prefix_, buckets, by_slot ? KeyStyle::kHashTag : KeyStyle::kPlain);
  }

  // One refund call per slot (one in all on a single Redis). Not behind the
  // breaker: a refund that fails loses nothing but the tokens it carried.
  // On one Redis the refunds of a turn of the loop (concurrency slots' releases
  // above all) go out together at its end, in one call.
  void refund(std::vector<BucketRefund> refunds, RefundHandler done) {
    if (refunds.empty()) {
      if (done) boost::asio::post(executor_, [done = std::move(done)] { done({}); });
      return;
    }
    if (clients_.client().routes_by_slot()) {
      return send_refunds(std::move(refunds), std::move(done));
    }
    const bool first = refund_batch_.empty();
    for (auto& r : refunds) refund_batch_.push_back(std::move(r));
    if (done) refund_waiters_.push_back(std::move(done));
    if (first) boost::asio::post(executor_, [self = shared_from_this()] { self->flush_refunds(); });
  }

  // The refunds of this turn of the loop: those Redis takes as a plain
  // command (a slot given back: ZREM) pipelined, which costs Redis a fraction
  // of a script call, the rest in one script call; each caller hears the
  // first error once all have answered.
  void flush_refunds() {
    std::vector<BucketRefund> batch = std::exchange(refund_batch_, {});
    auto gather = std::make_shared<RefundGather>(
        [waiters = std::exchange(refund_waiters_, {})](std::error_code ec) {
          for (const auto& waiter : waiters) waiter(ec);
        });
    std::vector<BucketRefund> scripted;
    std::vector<std::vector<std::string>> commands;
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

  void send_refunds(std::vector<BucketRefund> refunds, RefundHandler done) {
    const bool by_slot = clients_.client().routes_by_slot();
    std::vector<std::string> keys;
    keys.reserve(refunds.size());
    for (const auto& r : refunds) {
      keys.push_back(
          redis_key(key_prefix_, r.bucket, by_slot ? KeyStyle::kHashTag : KeyStyle::kPlain));
    }
    const CrossSlotContext context = cross_slot_context();
    per_slot_group(keys, by_slot, std::move(done),
                   [&](const std::vector<std::size_t>& indexes, auto counted) {
                     std::vector<std::string> group_keys;
                     std::vector<BucketRefund> group_refunds;
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

  // One renew_slots.lua call per slot group; not behind the breaker.
  void renew(std::vector<LimitDescriptor> slots, RefundHandler done) {
    redis::Client& client = clients_.client();
    if (slots.empty()) {
      if (done) boost::asio::post(executor_, [done = std::move(done)] { done({}); });
      return;
    }
    const bool by_slot = client.routes_by_slot();
    const std::vector<std::string> keys = keys_of(slots, by_slot);
    per_slot_group(
        keys, by_slot, std::move(done), [&](const std::vector<std::size_t>& indexes, auto counted) {
          std::vector<std::string> group_keys;
          std::vector<LimitDescriptor> group_slots;
          for (const std::size_t i : indexes) {
            group_keys.push_back(keys[i]);
            group_slots.push_back(slots[i]);
          }
          client.evalsha(renew_script_, std::move(group_keys),
                         codec_.encode_renew_args(group_slots),
                         [self = shared_from_this(), counted](std::error_code ec, redis::Reply) {
                           if (ec) spdlog::debug("redis: renewing slots failed: {}", ec.message());
                           counted(ec);
                         });
        });
  }

  void on_reply(std::error_code ec, redis::Reply reply, std::size_t count,
                const RateDecisionHandler& handler) {
    std::optional<RateDecision> decision;
    if (!ec) {
      decision = decode_script_reply(codec_, reply, count);
      if (!decision) ec = make_error_code(LimiterError::kBadReply);
    }
    on_outcome(ec, decision ? std::move(*decision) : RateDecision{}, handler);
  }

  // A decision's outcome: counted, fed to the breaker, handed on.
  void on_outcome(std::error_code ec, RateDecision decision, const RateDecisionHandler& handler) {
    const auto now = CircuitBreaker::Clock::now();
    if (ec) {
      const auto kind = ec == make_error_code(LimiterError::kBadReply)
                            ? std::string_view{"protocol"}
                            : redis::error_kind(ec);
      metrics_.add("sluice_redis_errors_total", scratch_labels({{"kind", kind}}));
      RateDecision unavailable;
      if (uses_breaker()) unavailable.unavailable_seconds = breaker_->on_failure(ec, now);
      return handler(ec, std::move(unavailable));
    }
    if (uses_breaker()) breaker_->on_success(now);
    handler({}, std::move(decision));
  }

  void fleet_heartbeat(const std::string& instance_id, std::chrono::milliseconds ttl, bool leave,
                       FleetHandler handler) {
    clients_.client().evalsha(
        fleet_script_, {key_prefix_ + "fleet"},
        {instance_id, std::to_string(ttl.count()), leave ? "1" : "0"},
        [handler = std::move(handler)](std::error_code ec, redis::Reply reply) {
          if (!ec && reply.type != redis::Reply::Type::kInteger) {
            ec = make_error_code(LimiterError::kBadReply);
          }
          const bool said = ec && reply.is_error();
          handler(ec, ec ? 0 : reply.integer, said ? reply.str : std::string_view{});
        });
  }

  // The admin API's reads and resets (bucket_admin.hpp), not behind the breaker.
  void inspect(const LimitDescriptor& bucket, BucketViewHandler handler) {
    read_bucket(clients_.client(), read_script_, key_prefix_, bucket, std::move(handler));
  }
  void reset(const LimitDescriptor& bucket, RefundHandler done) {
    reset_bucket(clients_.client(), reset_script_, key_prefix_, bucket, std::move(done));
  }

  void on_refund(std::error_code ec) {
    metrics_.add("sluice_ratelimit_refunds_total",
                 scratch_labels({{"result", ec ? "error" : "ok"}}));
    if (ec) spdlog::debug("redis: a refund failed: {}", ec.message());
  }

  void reconfigure(const RedisConfig& config) {
    breaker_->reconfigure(config.circuit_breaker.failures, config.circuit_breaker.open);
    key_prefix_ = config.key_prefix;
    codec_.set_deadline_after(script_deadline_after(config.timeout));
    clients_.reconfigure(redis_options(config));
  }

  void export_metrics() {
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

  std::vector<redis::NodeStatus> nodes() const { return clients_.installed().nodes(); }

  void close() {
    breaker_->close();
    clients_.close();
  }

  boost::asio::any_io_executor executor_;
  MetricsShard& metrics_;
  LimitsCodec codec_;
  redis::Script script_;
  redis::Script refund_script_;
  redis::Script fleet_script_;
  redis::Script read_script_;
  redis::Script reset_script_;
  redis::Script renew_script_;
  std::string key_prefix_;
  ClientSwitch clients_;
  std::shared_ptr<BreakerProbe> breaker_;
  DecisionBatcher batcher_;
  // Refunds of this turn of the loop, sent together (refund()), and who waits.
  std::vector<BucketRefund> refund_batch_;
  std::vector<RefundHandler> refund_waiters_;
  std::shared_ptr<const redis::Client::LateReplyHandler> late_;  // late_handler()
};

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
