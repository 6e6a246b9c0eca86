#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"

#include <atomic>
#include <chrono>
#include <span>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/algorithms/limits_codec.hpp"
#include "middleware/ratelimit/circuit_breaker.hpp"
#include "middleware/ratelimit/redis/bucket_admin.hpp"
#include "middleware/ratelimit/redis/cross_slot_call.hpp"
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

namespace {

double seconds(std::chrono::milliseconds d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

std::error_code make_error_code(LimiterError e) noexcept {
  static const LimiterCategory category;
  return {static_cast<int>(e), category};
}

class RedisRateLimiter::Impl : public std::enable_shared_from_this<Impl> {
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
        key_prefix_(config.key_prefix),
        make_client_(std::move(make_client)),
        breaker_(config.circuit_breaker.failures, config.circuit_breaker.open),
        breaker_failures_(config.circuit_breaker.failures),
        breaker_open_(config.circuit_breaker.open) {
    load_scripts(*client);
    install(std::move(client));
  }

  void load_scripts(redis::Client& client) {
    client.load_script(script_);
    client.load_script(refund_script_);
    client.load_script(fleet_script_);
    client.load_script(read_script_);
    client.load_script(reset_script_);
  }

  // Connect now rather than on the first decision (which would then fail open).
  void connect_now() { client_->connect({}); }

  // The first client, or the switch to a pending one that is ready.
  void install(std::unique_ptr<redis::Client> next) {
    if (client_) {
      carried_ += client_->stats();
      // Decisions in flight on the old connection finish there (a reload
      // drops nothing); it is closed once they must have, and kept until the
      // limiter goes, since other threads may still read its state.
      auto timer = std::make_shared<boost::asio::steady_timer>(
          executor_, client_->options().command_timeout * 2 + std::chrono::milliseconds(100));
      timer->async_wait(
          [timer, weak = weak_from_this(), old = client_.get()](boost::system::error_code) {
            if (auto self = weak.lock()) old->close();
          });
      retired_.push_back(std::move(client_));
    }
    client_ = std::move(next);
    current_ = client_.get();
  }

  // A reload to another Redis keeps deciding on the current connection until
  // the new one is ready (or could not be within its connect timeout).
  void maybe_switch() {
    if (!pending_) return;
    if (!pending_->is_ready() && CircuitBreaker::Clock::now() < pending_deadline_) return;
    install(std::move(pending_));
  }

  // On a Redis Cluster the breaker stays closed: a dead node fails only the
  // requests whose slots it owned (its client fails them at once), and one
  // breaker for the whole cluster would fail every other slot with them.
  bool uses_breaker() const { return !client_->routes_by_slot(); }

  void decide(const std::vector<LimitDescriptor>& descriptors, double cost,
              RateDecisionHandler handler) {
    maybe_switch();
    const auto now = CircuitBreaker::Clock::now();
    const bool by_slot = client_->routes_by_slot();
    // A half-open breaker's trial on a connection that is not up would fail
    // at once and hold the breaker open for another period: the trial is
    // left to the probe, which connects first.
    const bool trial_pending =
        !by_slot && !client_->is_ready() && breaker_.state(now) == CircuitBreaker::State::kHalfOpen;
    if (!by_slot && (trial_pending || !breaker_.allow(now))) {
      // Open breaker: no network time at all.
      sync_circuit_state(now);
      RateDecision unavailable;
      unavailable.unavailable_seconds = seconds(breaker_.open_remaining(now));
      boost::asio::post(executor_, [handler = std::move(handler), unavailable]() mutable {
        handler(make_error_code(LimiterError::kCircuitOpen), std::move(unavailable));
      });
      return;
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
    if (!by_slot && descriptors.size() == 1 && batchable(descriptors[0])) {
      return enqueue(descriptors[0], std::move(keys[0]), cost, std::move(handler));
    }
    call_script(std::move(keys), descriptors, cost, std::move(handler));
  }

  // One script call deciding one request's `descriptors` (its `keys`).
  void call_script(std::vector<std::string> keys, std::span<const LimitDescriptor> descriptors,
                   double cost, RateDecisionHandler handler) {
    client_->evalsha(script_, std::move(keys), codec_.encode_args(descriptors, cost),
                     [self = shared_from_this(), count = descriptors.size(),
                      handler = std::move(handler)](std::error_code ec, redis::Reply reply) {
                       self->on_reply(ec, std::move(reply), count, handler);
                     });
  }

  // A one-bucket decision waiting for the end of this turn of the loop.
  struct Queued {
    LimitDescriptor bucket;
    std::string key;
    double cost = 1;
    RateDecisionHandler handler;
  };

  // One enforced bucket of an algorithm that batches, on one Redis: decided
  // in a batch with the other such requests of this turn of the loop (one
  // script call for all of them).
  static bool batchable(const LimitDescriptor& bucket) {
    return !bucket.shadow && algorithm_row(bucket).batches;
  }

  void enqueue(const LimitDescriptor& bucket, std::string key, double cost,
               RateDecisionHandler handler) {
    batch_.push_back(Queued{bucket, std::move(key), cost, std::move(handler)});
    if (batch_posted_) return;
    batch_posted_ = true;
    boost::asio::post(executor_, [self = shared_from_this()] { self->flush_batch(); });
  }

  void flush_batch() {
    batch_posted_ = false;
    std::vector<Queued> batch;
    batch.swap(batch_);
    if (batch.empty()) return;
    maybe_switch();
    if (client_->routes_by_slot()) {
      // A reload installed a cluster client since these were queued: each goes
      // its own way, with the cluster's keys.
      for (Queued& queued : batch) {
        decide({queued.bucket}, queued.cost, std::move(queued.handler));
      }
      return;
    }
    // At most kMaxBatch requests per call: one call holds Redis for all of them.
    for (std::size_t first = 0; first < batch.size(); first += kMaxBatch) {
      send_batch(std::span<Queued>(batch).subspan(first,
                                                  std::min(kMaxBatch, batch.size() - first)));
    }
  }

  void send_batch(std::span<Queued> batch) {
    if (batch.size() == 1) {  // alone: the call of one request
      Queued& one = batch.front();
      return call_script({std::move(one.key)}, {&one.bucket, 1}, one.cost, std::move(one.handler));
    }
    std::vector<std::string> keys;
    std::vector<BatchRequest> requests;
    auto handlers = std::make_shared<std::vector<RateDecisionHandler>>();
    keys.reserve(batch.size());
    requests.reserve(batch.size());
    handlers->reserve(batch.size());
    for (Queued& queued : batch) {
      keys.push_back(std::move(queued.key));
      requests.push_back(BatchRequest{&queued.bucket, queued.cost});
      handlers->push_back(std::move(queued.handler));
    }
    client_->evalsha(script_, std::move(keys), codec_.encode_batch_args(requests),
                     [self = shared_from_this(), handlers](std::error_code ec, redis::Reply reply) {
                       self->on_batch_reply(ec, std::move(reply), *handlers);
                     });
  }

  // Every request of a batch gets its own outcome; an error is each one's.
  void on_batch_reply(std::error_code ec, redis::Reply reply,
                      const std::vector<RateDecisionHandler>& handlers) {
    std::optional<std::vector<RateDecision>> decisions;
    if (!ec) {
      decisions = decode_batch_reply(codec_, reply, handlers.size());
      if (!decisions) ec = make_error_code(LimiterError::kBadReply);
    }
    for (std::size_t i = 0; i < handlers.size(); ++i) {
      on_outcome(ec, decisions ? std::move((*decisions)[i]) : RateDecision{}, handlers[i]);
    }
  }

  CrossSlotContext cross_slot_context() {
    return CrossSlotContext{*client_,
                            script_,
                            refund_script_,
                            codec_,
                            shared_from_this(),
                            [weak = weak_from_this()](std::error_code ec) {
                              if (auto self = weak.lock()) self->on_refund(ec);
                            }};
  }

  // One refund call per slot (one in all on a single Redis). Not behind the
  // breaker: a refund that fails loses nothing but the tokens it carried.
  void refund(std::vector<BucketRefund> refunds, RefundHandler done) {
    maybe_switch();
    if (refunds.empty()) {
      if (done) boost::asio::post(executor_, [done = std::move(done)] { done({}); });
      return;
    }
    const bool by_slot = client_->routes_by_slot();
    std::vector<std::string> keys;
    keys.reserve(refunds.size());
    for (const auto& r : refunds) {
      keys.push_back(
          redis_key(key_prefix_, r.bucket, by_slot ? KeyStyle::kHashTag : KeyStyle::kPlain));
    }
    const CrossSlotContext context = cross_slot_context();
    struct Pending {
      std::size_t waiting = 0;
      std::error_code first_error;
      RefundHandler done;
    };
    auto pending = std::make_shared<Pending>();
    pending->done = std::move(done);
    const auto counted = [this, pending](std::error_code ec) {
      on_refund(ec);
      if (ec && !pending->first_error) pending->first_error = ec;
      if (--pending->waiting == 0 && pending->done) pending->done(pending->first_error);
    };
    if (!by_slot || refunds.size() == 1 || common_slot(keys)) {
      pending->waiting = 1;
      return send_refund(context, std::move(keys), std::move(refunds), counted);
    }
    const auto groups = group_by_slot(keys);
    pending->waiting = groups.size();
    for (const auto& group : groups) {
      std::vector<std::string> group_keys;
      std::vector<BucketRefund> group_refunds;
      for (const std::size_t i : group.indexes) {
        group_keys.push_back(std::move(keys[i]));
        group_refunds.push_back(refunds[i]);
      }
      send_refund(context, std::move(group_keys), std::move(group_refunds), counted);
    }
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
      if (uses_breaker()) {
        breaker_.on_failure(now);
        if (sync_circuit_state(now)) {
          spdlog::debug("redis circuit breaker open after: {}", ec.message());
          probe_when_due(now);
        }
        unavailable.unavailable_seconds = seconds(breaker_.open_remaining(now));
      }
      return handler(ec, std::move(unavailable));
    }
    if (uses_breaker()) {
      breaker_.on_success(now);
      sync_circuit_state(now);
    }
    handler({}, std::move(decision));
  }

  void fleet_heartbeat(const std::string& instance_id, std::chrono::milliseconds ttl, bool leave,
                       FleetHandler handler) {
    maybe_switch();
    client_->evalsha(fleet_script_, {key_prefix_ + "fleet"},
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
    maybe_switch();
    read_bucket(*client_, read_script_, key_prefix_, bucket, std::move(handler));
  }
  void reset(const LimitDescriptor& bucket, RefundHandler done) {
    maybe_switch();
    reset_bucket(*client_, reset_script_, key_prefix_, bucket, std::move(done));
  }

  void on_refund(std::error_code ec) {
    metrics_.add("sluice_ratelimit_refunds_total",
                 scratch_labels({{"result", ec ? "error" : "ok"}}));
    if (ec) spdlog::debug("redis: a refund failed: {}", ec.message());
  }

  void reconfigure(const RedisConfig& config) {
    if (config.circuit_breaker.failures != breaker_failures_ ||
        config.circuit_breaker.open != breaker_open_) {
      breaker_failures_ = config.circuit_breaker.failures;
      breaker_open_ = config.circuit_breaker.open;
      breaker_ = CircuitBreaker(breaker_failures_, breaker_open_);
      sync_circuit_state(CircuitBreaker::Clock::now());
      ++probe_seq_;  // a probe of the old breaker has nothing left to do
      probe_timer_.cancel();
    }
    key_prefix_ = config.key_prefix;
    auto options = redis_options(config);
    const auto& target = pending_ ? pending_->options() : client_->options();
    if (options != target) {
      spdlog::info("redis settings changed: connecting to {}:{}", options.host, options.port);
      pending_deadline_ = CircuitBreaker::Clock::now() + options.connect_timeout;
      pending_ = make_client_(std::move(options));
      load_scripts(*pending_);
      pending_->connect({});
    }
  }

  void export_metrics() {
    maybe_switch();
    // Counters of replaced clients are carried so the totals never go down.
    redis::Stats stats = carried_;
    stats += client_->stats();
    const auto count = [](std::uint64_t n) { return static_cast<double>(n); };
    metrics_.set("sluice_redis_commands_total", "", count(stats.commands_sent));
    metrics_.set("sluice_redis_writes_total", "", count(stats.writes));
    metrics_.set("sluice_redis_redirects_total", scratch_labels({{"kind", "moved"}}),
                 count(stats.redirects_moved));
    metrics_.set("sluice_redis_redirects_total", scratch_labels({{"kind", "ask"}}),
                 count(stats.redirects_ask));
    metrics_.set("sluice_redis_topology_refresh_total", scratch_labels({{"result", "ok"}}),
                 count(stats.topology_refresh_ok));
    metrics_.set("sluice_redis_topology_refresh_total", scratch_labels({{"result", "error"}}),
                 count(stats.topology_refresh_error));
    metrics_.set("sluice_redis_up", "", client_->is_ready() ? 1 : 0);
    metrics_.set("sluice_redis_circuit_open", "", circuit_open_ ? 1 : 0);
  }

  std::vector<redis::NodeStatus> nodes() const { return client_->nodes(); }

  // ---- Probing while the breaker is open --------------------------------
  // Without traffic nothing would ever close an open breaker, and the gauge and
  // /readyz would report it open long after Redis is back. So while it is open
  // the limiter takes the half-open trial itself, with a PING, as soon as the
  // open period is over; a failed PING re-opens it and the next probe follows
  // one open period later. While the connection is not ready (the client is
  // reconnecting with its own capped backoff) the probe waits for the outcome
  // of the client's next connect attempt rather than failing at once.

  void probe_when_due(CircuitBreaker::Clock::time_point now) {
    arm_probe(std::max(breaker_.open_remaining(now), std::chrono::milliseconds{1}));
  }

  void arm_probe(std::chrono::milliseconds delay) {
    if (closed_) return;
    probe_timer_.expires_after(delay);
    probe_timer_.async_wait(
        [weak = weak_from_this(), seq = ++probe_seq_](boost::system::error_code ec) {
          auto self = weak.lock();
          if (ec || !self || seq != self->probe_seq_) return;
          self->probe();
        });
  }

  void probe() {
    if (closed_) return;
    maybe_switch();
    const auto now = CircuitBreaker::Clock::now();
    switch (breaker_.state(now)) {
      case CircuitBreaker::State::kClosed:
        sync_circuit_state(now);
        return;
      case CircuitBreaker::State::kOpen:
        return probe_when_due(now);
      case CircuitBreaker::State::kHalfOpen:
        break;
    }
    if (!client_->is_ready()) {
      // No trial on a connection that cannot carry it: connect now rather
      // than after the client's own backoff (the probe is paced by open_ms),
      // then look again; a failed attempt waits another open period.
      const auto seq = ++probe_seq_;
      client_->connect_now([weak = weak_from_this(), seq](std::error_code ec) {
        auto self = weak.lock();
        if (!self || seq != self->probe_seq_) return;
        if (ec) {
          // Still unreachable: open for another period, so that Retry-After
          // and the gauge tell the truth until the next probe.
          const auto now = CircuitBreaker::Clock::now();
          self->breaker_.reopen(now);
          self->sync_circuit_state(now);
          return self->arm_probe(self->breaker_.open_for());
        }
        self->probe();
      });
      return;
    }
    if (!breaker_.allow(now)) {
      // A request holds the trial; its outcome closes or re-opens the breaker
      // (re-opening arms a probe). Look again after a trial's lifetime.
      return arm_probe(breaker_.open_for());
    }
    const auto seq = ++probe_seq_;
    client_->command({"PING"}, [weak = weak_from_this(), seq](std::error_code ec, redis::Reply) {
      auto self = weak.lock();
      if (!self || seq != self->probe_seq_) return;
      self->on_probe_reply(ec);
    });
  }

  void on_probe_reply(std::error_code ec) {
    const auto now = CircuitBreaker::Clock::now();
    if (!ec) {
      breaker_.on_success(now);
      if (!sync_circuit_state(now)) spdlog::info("redis circuit breaker closed: PING answered");
      return;
    }
    metrics_.add("sluice_redis_errors_total", scratch_labels({{"kind", redis::error_kind(ec)}}));
    breaker_.on_failure(now);
    if (sync_circuit_state(now)) probe_when_due(now);
  }

  // The breaker's open state as every reader sees it (/readyz through
  // circuit_open(), the sluice_redis_circuit_open gauge), refreshed from the
  // breaker after each of its transitions. Returns it.
  bool sync_circuit_state(CircuitBreaker::Clock::time_point now) {
    const bool open = breaker_.is_open(now);
    circuit_open_.store(open, std::memory_order_relaxed);
    return open;
  }

  void close() {
    closed_ = true;
    ++probe_seq_;
    probe_timer_.cancel();
    client_->close();
    if (pending_) pending_->close();
    for (auto& old : retired_) old->close();
  }

  boost::asio::any_io_executor executor_;
  MetricsShard& metrics_;
  LimitsCodec codec_;
  redis::Script script_;
  redis::Script refund_script_;
  redis::Script fleet_script_;
  redis::Script read_script_;
  redis::Script reset_script_;
  std::string key_prefix_;
  redis::ClientFactory make_client_;
  CircuitBreaker breaker_;
  unsigned breaker_failures_;
  std::chrono::milliseconds breaker_open_;
  std::unique_ptr<redis::Client> client_;
  std::unique_ptr<redis::Client> pending_;  // after a reload to another Redis, until ready
  CircuitBreaker::Clock::time_point pending_deadline_{};
  std::vector<std::unique_ptr<redis::Client>> retired_;
  std::atomic<redis::Client*> current_{nullptr};  // for readers on other threads
  redis::Stats carried_;
  std::atomic<bool> circuit_open_{false};
  boost::asio::steady_timer probe_timer_{executor_};
  std::uint64_t probe_seq_ = 0;  // a probe step runs only if nothing superseded it
  bool closed_ = false;
  // One-bucket decisions of this turn of the loop, sent as one call by flush_batch().
  std::vector<Queued> batch_;
  bool batch_posted_ = false;
  static constexpr std::size_t kMaxBatch = 64;
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
  return impl_->client_->last_error_message();
}
bool RedisRateLimiter::redis_ready() const {
  return impl_->current_.load()->is_ready();
}
bool RedisRateLimiter::circuit_open() const {
  return impl_->circuit_open_.load(std::memory_order_relaxed);
}
void RedisRateLimiter::close() {
  impl_->close();
}
void RedisRateLimiter::connect() {
  impl_->connect_now();
}

}  // namespace sluice
