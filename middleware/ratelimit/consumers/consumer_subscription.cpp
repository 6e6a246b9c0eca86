#include "middleware/ratelimit/consumers/consumer_subscription.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "gateway/config/text.hpp"
#include "middleware/ratelimit/consumers/consumer_store.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "upstream/redis/transport.hpp"

namespace sluice {
namespace {

constexpr auto kRetryInitial = std::chrono::milliseconds(100);
constexpr auto kRetryMax = std::chrono::milliseconds(2000);

}  // namespace

std::optional<std::vector<std::string>> parse_change_event(std::string_view payload) {
  std::vector<std::string> fingerprints;
  bool first = true;
  std::size_t start = 0;
  while (start <= payload.size()) {
    const std::size_t end = std::min(payload.find(' ', start), payload.size());
    const std::string_view field = payload.substr(start, end - start);
    if (first) {
      if (field.empty()) return std::nullopt;
      first = false;
    } else if (!field.empty()) {
      if (!is_key_fingerprint(field)) return std::nullopt;
      fingerprints.emplace_back(field);
    }
    start = end + 1;
  }
  return fingerprints;
}

ConsumerSubscription::ConsumerSubscription(boost::asio::any_io_executor executor, Nodes nodes,
                                           Forget forget, Stale stale)
    : executor_(executor),
      nodes_(std::move(nodes)),
      forget_(std::move(forget)),
      stale_(std::move(stale)),
      retry_(executor),
      backoff_(kRetryInitial, kRetryMax) {}

void ConsumerSubscription::configure(const Config& config) {
  const bool enabled = config.api_keys.store == ApiKeysConfig::Store::kRedis;
  const redis::Options options = redis_options(config.redis);
  const std::string channel = consumer_changes_channel(config.redis.key_prefix);
  if (enabled == enabled_ && options == options_ && channel == channel_) return;
  close();
  enabled_ = enabled;
  options_ = options;
  channel_ = channel;
  if (enabled_) subscribe();
}

void ConsumerSubscription::close() {
  enabled_ = false;
  subscribed_ = false;
  ++generation_;
  retry_.cancel();
  if (link_) link_->close();
  link_.reset();
}

void ConsumerSubscription::subscribe() {
  if (!enabled_) return;
  // A node the store's own connection reaches: the primary (Sentinel), a
  // primary of the Cluster (events are broadcast to every node), the server.
  std::vector<redis::Endpoint> candidates;
  for (const auto& node : nodes_()) {
    if (node.role == "sentinel") continue;
    const auto parsed = config::parse_address(node.address, false);
    if (const auto* address = std::get_if<HostPort>(&parsed)) {
      candidates.push_back(redis::Endpoint{address->host, address->port});
    }
  }
  const std::uint64_t generation = ++generation_;
  if (candidates.empty()) return on_down(generation, "no node of the store is known yet");
  const redis::Endpoint node = candidates[next_node_++ % candidates.size()];
  std::string tls_error;
  auto tls = redis::make_tls_context(options_, tls_error);
  link_ = std::make_shared<redis::PushLink>(
      executor_, options_, redis::PushLink::Credentials{options_.user, options_.password},
      std::move(tls), node);
  std::weak_ptr<ConsumerSubscription> weak = weak_from_this();
  link_->start(
      {{"SUBSCRIBE", channel_}},
      [weak, generation](const redis::Reply& reply) {
        if (auto self = weak.lock()) self->on_reply(generation, reply);
      },
      [weak, generation](std::string reason) {
        if (auto self = weak.lock()) self->on_down(generation, std::move(reason));
      });
}

void ConsumerSubscription::on_reply(std::uint64_t generation, const redis::Reply& reply) {
  if (generation != generation_) return;
  if (const auto payload = redis::pubsub_payload(reply, channel_)) {
    if (auto fingerprints = parse_change_event(*payload)) {
      if (!fingerprints->empty()) forget_(std::move(*fingerprints));
    }
    return;
  }
  using Type = redis::Reply::Type;
  if (reply.type == Type::kArray && !reply.elements.empty() &&
      reply.elements.front().str == "subscribe") {
    link_->settle();
    subscribed_ = true;
    backoff_.reset();
    if (reported_) spdlog::info("consumer store: change events received again");
    reported_ = false;
    // Whatever changed while no subscription was open was not heard of.
    stale_();
    return;
  }
  on_down(generation, "unexpected reply to SUBSCRIBE");
}

void ConsumerSubscription::on_down(std::uint64_t generation, std::string reason) {
  if (generation != generation_ || !enabled_) return;
  if (link_) link_->close();
  link_.reset();
  subscribed_ = false;
  if (!reported_) {
    spdlog::warn(
        "consumer store: no change events ({}); cached consumers are trusted for at most "
        "api_keys.cache_ttl_ms until the subscription is back",
        reason);
    reported_ = true;
  }
  retry_.expires_after(backoff_.next());
  retry_.async_wait([weak = weak_from_this(), generation](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || generation != self->generation_) return;
    self->subscribe();
  });
}

}  // namespace sluice
