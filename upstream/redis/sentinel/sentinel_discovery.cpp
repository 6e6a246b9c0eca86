// SentinelClient discovery: asking the sentinels for the primary's address
// (one short connection each, in order, the first address wins; a round
// that learns nothing is retried with capped backoff), and the +switch-master
// subscription kept open on one sentinel (on the next one when it dies).
#include <spdlog/spdlog.h>

#include "upstream/redis/sentinel/sentinel_impl.hpp"

namespace sluice::redis {

namespace asio = boost::asio;
using sentinel::MasterAnswer;

namespace {

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) {
    if (!out.empty()) out += "; ";
    out += part;
  }
  return out;
}

}  // namespace

std::shared_ptr<PushLink> SentinelClient::Impl::make_link(std::size_t index) {
  return std::make_shared<PushLink>(
      ex_, opts_, PushLink::Credentials{opts_.sentinel_user, opts_.sentinel_password}, tls_ctx_,
      sentinels_[index].address);
}

// --- resolving the primary --------------------------------------------------

void SentinelClient::Impl::request_resolve(std::string reason) {
  if (closed_) return;
  round_.reason = std::move(reason);
  if (round_.running || resolve_timer_armed_) return;  // the round under way or due answers it
  // Rounds triggered by the primary connection come at most once per
  // backoff_initial, so a primary refusing every attempt cannot spin.
  const auto earliest = last_resolve_end_ + opts_.backoff_initial;
  if (Clock::now() >= earliest) return resolve_now();
  resolve_timer_armed_ = true;
  resolve_timer_.expires_at(earliest);
  resolve_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || !self->resolve_timer_armed_) return;
    self->resolve_now();
  });
}

void SentinelClient::Impl::resolve_now() {
  if (closed_) return;
  resolve_timer_armed_ = false;
  resolve_timer_.cancel();
  stop_resolve();
  round_.running = true;
  round_.errors.clear();
  round_.unknown_master = false;
  ask_sentinel(0);
}

void SentinelClient::Impl::ask_sentinel(std::size_t index) {
  if (index == sentinels_.size()) return resolve_failed();
  if (!tls_setup_error_.empty()) return on_sentinel_failed(index, tls_setup_error_);
  round_.query = make_link(index);
  round_.query->start(
      {{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", opts_.sentinel_master}},
      [weak = weak_from_this(), index](const Reply& reply) {
        if (auto self = weak.lock()) self->on_answer(index, reply);
      },
      [weak = weak_from_this(), index](std::string reason) {
        if (auto self = weak.lock()) self->on_sentinel_failed(index, std::move(reason));
      });
}

void SentinelClient::Impl::on_answer(std::size_t index, const Reply& reply) {
  Sentinel& s = sentinels_[index];
  round_.query->close();
  if (reply.is_error()) return on_sentinel_failed(index, s.name + ": " + reply.str);
  Endpoint address;
  switch (sentinel::parse_master_address(reply, address)) {
    case MasterAnswer::kAddress:
      s.answered = true;
      s.last_error.clear();
      return resolve_succeeded(address, round_.reason);
    case MasterAnswer::kUnknownMaster:
      s.answered = true;
      s.last_error = "does not know master \"" + opts_.sentinel_master + "\"";
      round_.unknown_master = true;
      return ask_sentinel(index + 1);
    case MasterAnswer::kMalformed:
      return on_sentinel_failed(index, s.name + ": unexpected answer to GET-MASTER-ADDR-BY-NAME");
  }
}

void SentinelClient::Impl::on_sentinel_failed(std::size_t index, std::string reason) {
  Sentinel& s = sentinels_[index];
  s.answered = false;
  s.last_error = reason;
  round_.errors.push_back(std::move(reason));
  ask_sentinel(index + 1);
}

void SentinelClient::Impl::resolve_succeeded(const Endpoint& address, std::string_view reason) {
  stop_resolve();
  last_resolve_end_ = Clock::now();
  counters_.refresh_ok.fetch_add(1, std::memory_order_relaxed);
  resolve_backoff_.reset();
  resolve_error_ = {};
  if (primary_address_ != address) switch_primary(address, reason);
}

void SentinelClient::Impl::resolve_failed() {
  round_.running = false;
  round_.query.reset();
  last_resolve_end_ = Clock::now();
  counters_.refresh_error.fetch_add(1, std::memory_order_relaxed);
  if (round_.unknown_master) {
    resolve_error_.code = Error::kServer;
    resolve_error_.message = "no sentinel knows master \"" + opts_.sentinel_master + "\"";
    if (!round_.errors.empty()) resolve_error_.message += " (" + join(round_.errors) + ")";
  } else {
    resolve_error_.code = Error::kConnect;
    resolve_error_.message = "no sentinel answered: " + join(round_.errors);
  }
  // Warn once per streak of failures; the retries are logged at debug.
  const auto level = ++resolve_error_.streak == 1 ? spdlog::level::warn : spdlog::level::debug;
  spdlog::log(level, "redis sentinel: {}", resolve_error_.message);
  if (!primary_) {
    own_state_.store(State::kBackoff, std::memory_order_relaxed);
    for (ConnectHandler& waiter : waiters_) {
      asio::post(ex_, [h = std::move(waiter), ec = resolve_error_.code] { h(ec); });
    }
    waiters_.clear();
  }
  resolve_timer_armed_ = true;
  resolve_timer_.expires_after(resolve_backoff_.next());
  resolve_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || !self->resolve_timer_armed_) return;
    if (!self->primary_) self->own_state_.store(State::kConnecting, std::memory_order_relaxed);
    self->resolve_now();
  });
}

void SentinelClient::Impl::stop_resolve() {
  if (round_.query) round_.query->close();
  round_.query.reset();
  round_.running = false;
}

// --- the +switch-master subscription ----------------------------------------

void SentinelClient::Impl::subscribe() {
  if (closed_) return;
  const std::size_t index = subscription_.index;
  subscription_.link = make_link(index);
  subscription_.link->start(
      {{"SUBSCRIBE", std::string(sentinel::kSwitchMasterChannel)}},
      [weak = weak_from_this(), index](const Reply& reply) {
        if (auto self = weak.lock()) self->on_subscription_reply(index, reply);
      },
      [weak = weak_from_this(), index](std::string reason) {
        if (auto self = weak.lock()) self->on_subscription_down(index, std::move(reason));
      });
}

void SentinelClient::Impl::on_subscription_reply(std::size_t index, const Reply& reply) {
  const auto payload = pubsub_payload(reply, sentinel::kSwitchMasterChannel);
  if (!payload) {
    if (reply.type != Reply::Type::kArray || reply.elements.empty() ||
        reply.elements.front().str != "subscribe") {
      return on_subscription_down(index,
                                  sentinels_[index].name + ": unexpected reply to SUBSCRIBE");
    }
    subscription_.link->settle();
    sentinels_[index].answered = true;
    sentinels_[index].last_error.clear();
    subscription_.backoff.reset();
    // A failover announced while no subscription was open would be missed.
    if (subscription_.subscribed_once) request_resolve("subscription restored");
    subscription_.subscribed_once = true;
    return;
  }
  const auto event = sentinel::parse_switch_master(*payload);
  if (!event) {
    spdlog::warn("redis sentinel: unreadable +switch-master event: {}", *payload);
    return;
  }
  if (event->master != opts_.sentinel_master) return;
  // The announcement is newer than any answer still on its way.
  resolve_succeeded(event->to, "+switch-master");
}

void SentinelClient::Impl::on_subscription_down(std::size_t index, std::string reason) {
  if (closed_) return;
  if (subscription_.link) subscription_.link->close();
  subscription_.link.reset();
  sentinels_[index].answered = false;
  sentinels_[index].last_error = reason;
  spdlog::debug("redis sentinel: subscription lost: {}", reason);
  // The next sentinel, after a pause that grows while none keeps it.
  subscription_.index = (index + 1) % sentinels_.size();
  subscription_.timer.expires_after(subscription_.backoff.next());
  subscription_.timer.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (!ec && self) self->subscribe();
  });
}

}  // namespace sluice::redis
