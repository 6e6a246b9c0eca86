// SentinelClient: the handle, the public operations, and the primary
// connection: made for each address the sentinels give, watched for a lost
// connection, a failed connect or a READONLY reply (each asks the sentinels
// again), and replaced when the address changes. Discovery is in
// sentinel_discovery.cpp.
#include "upstream/redis/sentinel/sentinel_client.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>

#include "upstream/redis/sentinel/sentinel_impl.hpp"
#include "upstream/redis/transport.hpp"

namespace sluice::redis {

namespace asio = boost::asio;

SentinelClient::Impl::Impl(asio::any_io_executor ex, Options options)
    : ex_(std::move(ex)),
      opts_(std::move(options)),
      data_opts_(opts_),
      tls_ctx_(make_tls_context(opts_, tls_setup_error_)),
      resolve_timer_(ex_),
      resolve_backoff_(opts_.backoff_initial, opts_.backoff_max),
      subscription_(ex_, opts_) {
  data_opts_.require_primary = true;
  data_opts_.topology = Topology::kStandalone;
  data_opts_.nodes.clear();
  const auto add = [this](const Endpoint& e) {
    Sentinel s;
    s.address = e;
    s.name = format_address(e.host, e.port);
    sentinels_.push_back(std::move(s));
  };
  add(Endpoint{opts_.host, opts_.port});
  for (const Endpoint& node : opts_.nodes) add(node);
}

// --- public operations ------------------------------------------------------

void SentinelClient::Impl::connect(ConnectHandler handler, bool now) {
  if (closed_) {
    if (handler) asio::post(ex_, [h = std::move(handler)] { h(Error::kClosed); });
    return;
  }
  start();
  if (primary_) {
    if (now) return primary_->connect_now(std::move(handler));
    return primary_->connect(std::move(handler));
  }
  if (handler) waiters_.push_back(std::move(handler));
  // A caller pacing its own attempts skips the wait before the next resolve.
  if (now && resolve_timer_armed_) resolve_now();
}

SingleNodeClient* SentinelClient::Impl::route(Handler& handler) {
  if (primary_) return primary_.get();
  // No primary known yet: fail now rather than queue, as a single node does.
  if (!handler) handler = [](std::error_code, Reply) {};
  std::error_code ec = Error::kClosed;
  if (!closed_) {
    ec = Error::kNotConnected;
    counters_.not_connected.fetch_add(1, std::memory_order_relaxed);
    start();
  }
  asio::post(ex_, [h = std::move(handler), ec] { h(ec, Reply{}); });
  return nullptr;
}

void SentinelClient::Impl::load_script(const Script& script) {
  for (const Script& known : scripts_) {
    if (known.sha1() == script.sha1()) return;
  }
  scripts_.push_back(script);
  if (primary_) primary_->load_script(script);
}

void SentinelClient::Impl::close() {
  if (closed_) return;
  closed_ = true;
  own_state_.store(State::kClosed, std::memory_order_relaxed);
  stop_resolve();
  resolve_timer_.cancel();
  subscription_.timer.cancel();
  if (subscription_.link) subscription_.link->close();
  if (primary_) primary_->close();
  for (Retiring& r : retiring_) r.client->close();
  for (ConnectHandler& waiter : waiters_) {
    asio::post(ex_, [h = std::move(waiter)] { h(Error::kClosed); });
  }
  waiters_.clear();
}

State SentinelClient::Impl::state() const {
  const State own = own_state_.load(std::memory_order_relaxed);
  if (own == State::kClosed) return own;
  std::lock_guard lock(view_mutex_);
  return primary_ ? primary_->state() : own;
}

Stats SentinelClient::Impl::stats() const {
  Stats total;
  {
    std::lock_guard lock(view_mutex_);
    total = retired_stats_;
    if (primary_) total += primary_->stats();
    for (const Retiring& r : retiring_) total += r.client->stats();
  }
  const auto get = [](const std::atomic<std::uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  total.not_connected += get(counters_.not_connected);
  total.topology_refresh_ok += get(counters_.refresh_ok);
  total.topology_refresh_error += get(counters_.refresh_error);
  total.topology_changes += get(counters_.changes);
  return total;
}

std::error_code SentinelClient::Impl::last_error() const {
  if (resolve_error_.code || !primary_) return resolve_error_.code;
  return primary_->last_error();
}

std::string SentinelClient::Impl::last_error_message() const {
  if (resolve_error_.code || !primary_) return resolve_error_.message;
  return primary_->last_error_message();
}

std::vector<NodeStatus> SentinelClient::Impl::nodes() const {
  std::vector<NodeStatus> out;
  if (primary_) {
    out = primary_->nodes();
  } else {
    NodeStatus unknown;
    unknown.address = "(unresolved)";
    unknown.role = "primary";
    unknown.state = state();
    unknown.last_error = resolve_error_.message;
    out.push_back(std::move(unknown));
  }
  for (const Sentinel& s : sentinels_) {
    NodeStatus node;
    node.address = s.name;
    node.role = "sentinel";
    node.state = s.answered ? State::kReady : State::kDisconnected;
    node.last_error = s.last_error;
    out.push_back(std::move(node));
  }
  return out;
}

// --- the primary connection -------------------------------------------------

void SentinelClient::Impl::start() {
  if (started_ || closed_) return;
  started_ = true;
  own_state_.store(State::kConnecting, std::memory_order_relaxed);
  request_resolve("start");
  subscribe();
}

void SentinelClient::Impl::switch_primary(const Endpoint& address, std::string_view reason) {
  const std::string to = format_address(address.host, address.port);
  if (primary_address_) {
    counters_.changes.fetch_add(1, std::memory_order_relaxed);
    spdlog::info("redis sentinel: primary of {} is now {} (was {}): {}", opts_.sentinel_master, to,
                 format_address(primary_address_->host, primary_address_->port), reason);
  } else {
    spdlog::info("redis sentinel: primary of {} is {}", opts_.sentinel_master, to);
  }
  Options options = data_opts_;
  options.host = address.host;
  options.port = address.port;
  auto next = std::make_shared<SingleNodeClient>(ex_, std::move(options));
  // Events arrive from inside the connection's handlers: act on them later.
  next->on_event([weak = weak_from_this(), generation = generation_ + 1](
                     SingleNodeClient::Event event, std::string_view detail) {
    auto self = weak.lock();
    if (!self) return;
    asio::post(self->ex_, [weak, generation, event, detail = std::string(detail)] {
      if (auto s = weak.lock()) s->on_primary_event(generation, event, detail);
    });
  });
  for (const Script& script : scripts_) next->load_script(script);
  Primary old;
  {
    std::lock_guard lock(view_mutex_);
    old = std::exchange(primary_, next);
  }
  ++generation_;
  primary_address_ = address;
  if (old) retire(std::move(old));
  // New commands fail fast until the new connection is ready.
  next->connect({});
  for (ConnectHandler& waiter : waiters_) next->connect(std::move(waiter));
  waiters_.clear();
}

void SentinelClient::Impl::retire(Primary old) {
  // Commands in flight on the old connection complete there; it is closed
  // once their deadlines must have passed.
  auto timer = std::make_shared<asio::steady_timer>(ex_, opts_.command_timeout * 2);
  timer->async_wait(
      [weak = weak_from_this(), client = old.get()](const boost::system::error_code& ec) {
        auto self = weak.lock();
        if (ec || !self) return;
        std::lock_guard lock(self->view_mutex_);
        auto& list = self->retiring_;
        for (auto it = list.begin(); it != list.end(); ++it) {
          if (it->client.get() != client) continue;
          it->client->close();
          self->retired_stats_ += it->client->stats();
          list.erase(it);
          return;
        }
      });
  std::lock_guard lock(view_mutex_);
  retiring_.push_back({std::move(old), std::move(timer)});
}

void SentinelClient::Impl::on_primary_event(std::uint64_t generation, SingleNodeClient::Event event,
                                            const std::string& detail) {
  if (closed_ || generation != generation_) return;
  switch (event) {
    case SingleNodeClient::Event::kConnectionLost:
      // Reconnect now rather than after the connection's backoff, and ask
      // the sentinels meanwhile: a failover may have moved the primary.
      primary_->connect_now({});
      return request_resolve("connection lost");
    case SingleNodeClient::Event::kConnectFailed:
      return request_resolve("connect failed");
    case SingleNodeClient::Event::kErrorReply:
      // The primary was demoted under us.
      if (detail.starts_with("READONLY")) request_resolve("READONLY");
      return;
  }
}

// --- the handle -------------------------------------------------------------

SentinelClient::SentinelClient(asio::any_io_executor executor, Options options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

SentinelClient::~SentinelClient() {
  if (impl_) impl_->close();
}

void SentinelClient::connect(ConnectHandler handler) {
  impl_->connect(std::move(handler), false);
}
void SentinelClient::connect_now(ConnectHandler handler) {
  impl_->connect(std::move(handler), true);
}
void SentinelClient::command(std::vector<std::string> args, Handler handler) {
  if (SingleNodeClient* primary = impl_->route(handler)) {
    primary->command(std::move(args), std::move(handler));
  }
}
void SentinelClient::evalsha(const Script& script, std::vector<std::string> keys,
                             std::vector<std::string> args, Handler handler) {
  if (SingleNodeClient* primary = impl_->route(handler)) {
    primary->evalsha(script, std::move(keys), std::move(args), std::move(handler));
  }
}
void SentinelClient::evalsha_late(const Script& script, std::vector<std::string> keys,
                                  std::vector<std::string> args, Handler handler,
                                  std::shared_ptr<const LateReplyHandler> late) {
  if (SingleNodeClient* primary = impl_->route(handler)) {
    primary->evalsha_late(script, std::move(keys), std::move(args), std::move(handler),
                          std::move(late));
  }
}
void SentinelClient::load_script(const Script& script) {
  impl_->load_script(script);
}
void SentinelClient::close() {
  impl_->close();
}
State SentinelClient::state() const {
  return impl_->state();
}
Stats SentinelClient::stats() const {
  return impl_->stats();
}
std::error_code SentinelClient::last_error() const {
  return impl_->last_error();
}
std::string SentinelClient::last_error_message() const {
  return impl_->last_error_message();
}
const Options& SentinelClient::options() const {
  return impl_->opts_;
}
std::vector<NodeStatus> SentinelClient::nodes() const {
  return impl_->nodes();
}

}  // namespace sluice::redis
