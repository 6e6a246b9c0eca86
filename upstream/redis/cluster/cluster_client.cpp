// ClusterClient: the handle, the public operations and the command path:
// each evalsha goes to the owner of its first key's slot (an O(1) table
// lookup), and MOVED, ASK and TRYAGAIN replies are followed inside the
// command's deadline. Learning the map and keeping the node connections is
// in cluster_topology.cpp.
#include "upstream/redis/cluster/cluster_client.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>

#include "upstream/redis/cluster/cluster_impl.hpp"
#include "upstream/redis/cluster/redirect.hpp"
#include "upstream/redis/cluster/slot.hpp"

namespace sluice::redis {

namespace asio = boost::asio;
using Impl = ClusterClient::Impl;

namespace {
// A TRYAGAIN is sent again after this pause (the migration of a few keys).
constexpr std::chrono::milliseconds kTryAgainPause{15};
}  // namespace

// --- public operations ------------------------------------------------------

void Impl::command(std::vector<std::string> args, Handler handler) {
  if (!handler) handler = [](std::error_code, Reply) {};
  if (closed_) return fail_fast(std::move(handler), Error::kClosed);
  Node* node = any_ready_node();
  if (!node) {
    request_refresh("no primary ready");
    return fail_fast(std::move(handler), Error::kNotConnected);
  }
  node->client->command(std::move(args), std::move(handler));
}

Impl::Node* Impl::ready_owner(std::uint16_t slot) {
  const std::uint16_t index = route_[slot];
  Node* node = index == kNoNode ? nullptr : nodes_[index].get();
  if (node && node->client->state() == State::kReady) return node;
  request_refresh(node ? "a connection lost" : "a slot without an owner");
  return nullptr;
}

void Impl::keyed_command(std::vector<std::string> args, Handler handler) {
  if (!handler) handler = [](std::error_code, Reply) {};
  if (closed_) return fail_fast(std::move(handler), Error::kClosed);
  if (args.size() < 2) return command(std::move(args), std::move(handler));
  Node* node = ready_owner(cluster::key_slot(args[1]));
  if (!node) return fail_fast(std::move(handler), Error::kNotConnected);
  node->client->command(std::move(args), [self = shared_from_this(), handler = std::move(handler)](
                                             std::error_code ec, Reply reply) {
    self->unfollowed_redirect(ec, reply, "a redirect of a keyed command");
    handler(ec, std::move(reply));
  });
}

std::optional<cluster::Redirect::Kind> Impl::unfollowed_redirect(std::error_code ec,
                                                                 const Reply& reply,
                                                                 const char* why) {
  if (!ec || closed_) return std::nullopt;
  const std::optional<cluster::Redirect> redirect = cluster::parse_redirect(reply.str);
  if (!redirect || (redirect->kind != cluster::Redirect::Kind::kMoved &&
                    redirect->kind != cluster::Redirect::Kind::kAsk)) {
    return std::nullopt;
  }
  request_refresh(why);
  return redirect->kind;
}

void Impl::evalsha_unredirected(const Script& script, std::vector<std::string> keys,
                                std::vector<std::string> args, Handler handler,
                                std::shared_ptr<const Client::LateReplyHandler> late) {
  if (!handler) handler = [](std::error_code, Reply) {};
  if (closed_) return fail_fast(std::move(handler), Error::kClosed);
  const Script* known = remember_script(script);
  Node* node = keys.empty() ? nullptr : ready_owner(cluster::key_slot(keys.front()));
  if (!node) return fail_fast(std::move(handler), Error::kNotConnected);
  node->client->evalsha_late(
      *known, std::move(keys), std::move(args),
      [self = shared_from_this(), handler = std::move(handler)](std::error_code ec, Reply reply) {
        if (const auto kind = self->unfollowed_redirect(
                ec, reply, "a redirect of a call that does not follow it")) {
          bump(*kind == cluster::Redirect::Kind::kMoved ? self->counters_.redirects_moved
                                                        : self->counters_.redirects_ask);
        }
        handler(ec, std::move(reply));
      },
      std::move(late));
}

void Impl::evalsha(const Script& script, std::vector<std::string> keys,
                   std::vector<std::string> args, Handler handler,
                   std::shared_ptr<const Client::LateReplyHandler> late) {
  if (!handler) handler = [](std::error_code, Reply) {};
  if (closed_) return fail_fast(std::move(handler), Error::kClosed);
  const Script* known = remember_script(script);
  Node* node = nullptr;
  std::uint16_t slot = 0;
  if (keys.empty()) {
    node = any_ready_node();
    if (!node) request_refresh("no primary ready");
  } else {
    slot = cluster::key_slot(keys.front());
    node = ready_owner(slot);
  }
  if (!node) return fail_fast(std::move(handler), Error::kNotConnected);
  auto call = std::make_shared<Call>();
  call->script = known;
  call->args.body = script.shared_body();
  call->args.numkeys = std::to_string(keys.size());
  call->args.keys = std::move(keys);
  call->args.args = std::move(args);
  call->args.late = std::move(late);
  call->handler = std::move(handler);
  call->deadline = Clock::now() + opts_.command_timeout;
  call->slot = slot;
  send(call, *node, false);
}

void Impl::load_script(const Script& script) {
  if (!closed_) remember_script(script);
}

const Script* Impl::remember_script(const Script& script) {
  auto [it, inserted] = scripts_.try_emplace(script.sha1(), script);
  if (inserted) {
    // Every node loads it now and on each new connection, so that an
    // EVALSHA (also one right after ASKING) never waits for a SCRIPT LOAD.
    for (const auto& node : nodes_) node->client->load_script(script);
  }
  return &it->second;
}

void Impl::close() {
  if (closed_) return;
  closed_ = true;
  state_.store(State::kClosed, std::memory_order_relaxed);
  refresh_timer_.timer.cancel();
  tick_timer_.cancel();
  ++refresh_.seq;
  close_probes();
  {
    std::lock_guard lock(nodes_mutex_);
    for (const auto& node : nodes_) node->client->close();
    for (const auto& r : retiring_) r.node->client->close();
  }
  // Parked calls wake up, see closed_ and complete with kClosed.
  for (const CallPtr& call : parked_) call->timer->cancel();
  notify_waiters(Error::kClosed);
}

Impl::Node* Impl::any_ready_node() const {
  for (const auto& node : nodes_) {
    if (node->slots != 0 && node->client->state() == State::kReady) return node.get();
  }
  return nullptr;
}

void Impl::fail_fast(Handler handler, Error error) {
  if (error == Error::kNotConnected) bump(counters_.not_connected);
  asio::post(ex_, [h = std::move(handler), error] { h(error, Reply{}); });
}

// --- sending and redirects --------------------------------------------------

void Impl::send(const CallPtr& call, Node& node, bool asking) {
  call->at = node.address;
  // ASKING and the call go out back to back on the same connection, so the
  // node reads them in that order.
  if (asking) node.client->command_until(call->deadline, {"ASKING"}, {});
  node.client->evalsha_shared(call->deadline, *call->script,
                              std::shared_ptr<CommandQueue::ScriptCall>(call, &call->args),
                              [self = shared_from_this(), call](std::error_code ec, Reply reply) {
                                self->on_reply(call, ec, std::move(reply));
                              });
}

void Impl::on_reply(const CallPtr& call, std::error_code ec, Reply reply) {
  if (closed_) return complete(call, Error::kClosed);
  if (ec == Error::kConnectionLost || ec == Error::kNotConnected) {
    request_refresh("a connection lost");
    return complete(call, ec, std::move(reply));
  }
  const bool server_error = ec == Error::kServer && reply.is_error();
  const cluster::NextStep step =
      cluster::next_step(server_error, reply.str, call->at.host, call->resends);
  using Kind = cluster::NextStep::Kind;
  switch (step.kind) {
    case Kind::kComplete:
      return complete(call, ec, std::move(reply));
    case Kind::kClusterDown:
      request_refresh("CLUSTERDOWN");
      return complete(call, ec, std::move(reply));
    case Kind::kRetryLater:
      return retry_later(call);
    case Kind::kFollowMoved: {
      bump(counters_.redirects_moved);
      Node& target = node_for(step.target);
      on_moved(step.slot, target);
      request_refresh("MOVED");
      return resend(call, target, false);
    }
    case Kind::kFollowAsk:
      bump(counters_.redirects_ask);
      return resend(call, node_for(step.target), true);
  }
}

void Impl::resend(const CallPtr& call, Node& node, bool asking) {
  ++call->resends;
  if (Clock::now() >= call->deadline) {
    return give_up(call, Error::kTimeout);
  }
  if (node.client->state() == State::kReady) return send(call, node, asking);
  wait_for_node(call, node, asking);
}

void Impl::retry_later(const CallPtr& call) {
  if (Clock::now() + kTryAgainPause >= call->deadline) {
    return give_up(call, Error::kTimeout);
  }
  const std::uint64_t seq = ++call->wait_seq;
  park(call, Clock::now() + kTryAgainPause);
  call->timer->async_wait([self = shared_from_this(), call, seq](const boost::system::error_code&) {
    if (seq != call->wait_seq) return;
    self->unpark(call);
    if (self->closed_) return self->complete(call, Error::kClosed);
    const std::uint16_t index = self->route_[call->slot];
    if (index == kNoNode) return self->give_up(call, Error::kNotConnected);
    self->resend(call, *self->nodes_[index], false);
  });
}

void Impl::wait_for_node(const CallPtr& call, Node& node, bool asking) {
  // A new owner that is still connecting: wait for it, but only within the
  // call's deadline; past that the call fails as not connected.
  const std::uint64_t seq = ++call->wait_seq;
  park(call, call->deadline);
  const NodeAddress address = node.address;
  node.client->connect([self = shared_from_this(), call, seq, address, asking](std::error_code ec) {
    if (seq != call->wait_seq) return;
    ++call->wait_seq;
    self->unpark(call);
    Node* target = self->find_node(address);
    if (self->closed_) return self->complete(call, Error::kClosed);
    if (ec || !target || Clock::now() >= call->deadline) {
      return self->give_up(call, Error::kNotConnected);
    }
    self->send(call, *target, asking);
  });
  call->timer->async_wait([self = shared_from_this(), call, seq](const boost::system::error_code&) {
    if (seq != call->wait_seq) return;
    ++call->wait_seq;
    self->unpark(call);
    self->give_up(call, self->closed_ ? Error::kClosed : Error::kNotConnected);
  });
}

void Impl::park(const CallPtr& call, Clock::time_point until) {
  if (!call->timer) call->timer = std::make_unique<asio::steady_timer>(ex_);
  call->timer->expires_at(until);
  parked_.push_back(call);
}

void Impl::unpark(const CallPtr& call) {
  const auto it = std::find(parked_.begin(), parked_.end(), call);
  if (it != parked_.end()) parked_.erase(it);
}

void Impl::give_up(const CallPtr& call, Error error) {
  if (error == Error::kNotConnected) bump(counters_.not_connected);
  if (error == Error::kTimeout) bump(counters_.timeouts);
  complete(call, error);
}

void Impl::complete(const CallPtr& call, std::error_code ec, Reply reply) {
  Handler handler = std::move(call->handler);
  if (handler) handler(ec, std::move(reply));
}

// --- the handle -------------------------------------------------------------

ClusterClient::ClusterClient(asio::any_io_executor executor, Options options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

ClusterClient::~ClusterClient() {
  if (impl_) impl_->close();
}

void ClusterClient::connect(ConnectHandler handler) {
  impl_->connect(std::move(handler), false);
}
void ClusterClient::connect_now(ConnectHandler handler) {
  impl_->connect(std::move(handler), true);
}
void ClusterClient::command(std::vector<std::string> args, Handler handler) {
  impl_->command(std::move(args), std::move(handler));
}
void ClusterClient::evalsha_unredirected(const Script& script, std::vector<std::string> keys,
                                         std::vector<std::string> args, Handler handler,
                                         std::shared_ptr<const LateReplyHandler> late) {
  impl_->evalsha_unredirected(script, std::move(keys), std::move(args), std::move(handler),
                              std::move(late));
}
void ClusterClient::keyed_command(std::vector<std::string> args, Handler handler) {
  impl_->keyed_command(std::move(args), std::move(handler));
}
void ClusterClient::evalsha(const Script& script, std::vector<std::string> keys,
                            std::vector<std::string> args, Handler handler) {
  impl_->evalsha(script, std::move(keys), std::move(args), std::move(handler));
}
void ClusterClient::evalsha_late(const Script& script, std::vector<std::string> keys,
                                 std::vector<std::string> args, Handler handler,
                                 std::shared_ptr<const LateReplyHandler> late) {
  impl_->evalsha(script, std::move(keys), std::move(args), std::move(handler), std::move(late));
}
void ClusterClient::load_script(const Script& script) {
  impl_->load_script(script);
}
void ClusterClient::close() {
  impl_->close();
}
State ClusterClient::state() const {
  return impl_->state();
}
Stats ClusterClient::stats() const {
  return impl_->stats();
}
std::error_code ClusterClient::last_error() const {
  return impl_->last_error_;
}
std::string ClusterClient::last_error_message() const {
  return impl_->last_error_message_;
}
const Options& ClusterClient::options() const {
  return impl_->opts_;
}
std::vector<NodeStatus> ClusterClient::nodes() const {
  return impl_->nodes();
}
std::optional<std::size_t> ClusterClient::slot_owner(std::uint16_t slot) const {
  if (slot >= impl_->route_.size() || impl_->route_[slot] == Impl::kNoNode) return std::nullopt;
  return impl_->route_[slot];
}

}  // namespace sluice::redis
