// ClusterClient's nodes: one SingleNodeClient per primary, created when it
// appears in the map and closed once it owns no slot any more (after its
// in-flight commands could have finished), the slot -> node table, and the
// readiness every thread may read, kept up to date by a short tick. Learning
// the map is in cluster_map_refresh.cpp.
#include <algorithm>
#include <boost/asio/post.hpp>

#include "upstream/redis/cluster/cluster_impl.hpp"

namespace sluice::redis {

namespace asio = boost::asio;
using Impl = ClusterClient::Impl;

namespace {
// Refreshes start at least this far apart, however many triggers arrive.
constexpr std::chrono::milliseconds kMinRefreshGap{100};
// ... and at most this much apart while refreshes keep finding the same map.
constexpr std::chrono::milliseconds kMaxRefreshGap{300};
// How often readiness and the retired nodes are looked at.
constexpr std::chrono::milliseconds kTick{100};
}  // namespace

Impl::Impl(asio::any_io_executor ex, Options options)
    : ex_(std::move(ex)),
      opts_(std::move(options)),
      route_(cluster::kSlotCount, kNoNode),
      pacer_(kMinRefreshGap, kMaxRefreshGap),
      backoff_(opts_.backoff_initial, opts_.backoff_max),
      refresh_timer_(ex_),
      tick_timer_(ex_) {
  seeds_.push_back({opts_.host, opts_.port});
  for (const Endpoint& node : opts_.nodes) seeds_.push_back({node.host, node.port});
}

void Impl::connect(ConnectHandler handler, bool now) {
  if (closed_ || state() == State::kReady) {
    if (handler) {
      const std::error_code ec = closed_ ? Error::kClosed : std::error_code{};
      asio::post(ex_, [h = std::move(handler), ec] { h(ec); });
    }
    return;
  }
  if (handler) waiters_.push_back(std::move(handler));
  if (!started_) return request_refresh("connect");
  if (!now) return;
  for (const auto& node : nodes_) {
    if (node->client->state() != State::kReady) node->client->connect_now({});
  }
  if (!have_map_ || unowned_ != 0) request_refresh("connect");
}

Stats Impl::stats() const {
  Stats s;
  {
    std::lock_guard lock(nodes_mutex_);
    s = retired_stats_;
    for (const auto& node : nodes_) s += node->client->stats();
    for (const auto& r : retiring_) s += r.node->client->stats();
  }
  const auto get = [](const std::atomic<std::uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  s.not_connected += get(counters_.not_connected);
  s.timeouts += get(counters_.timeouts);
  s.redirects_moved += get(counters_.redirects_moved);
  s.redirects_ask += get(counters_.redirects_ask);
  s.topology_refresh_ok += get(counters_.topology_refresh_ok);
  s.topology_refresh_error += get(counters_.topology_refresh_error);
  s.topology_changes += get(counters_.topology_changes);
  return s;
}

std::vector<NodeStatus> Impl::nodes() const {
  std::vector<NodeStatus> out;
  for (const auto& node : nodes_) {
    if (node->slots == 0) continue;
    out.push_back({node->label, "primary", node->client->state(), node->slots,
                   node->client->last_error_message()});
  }
  return out;
}

// --- node clients -----------------------------------------------------------

Options Impl::node_options(const NodeAddress& address) const {
  Options o = opts_;
  o.host = address.host;
  o.port = address.port;
  o.db = 0;  // a cluster has only db 0
  o.topology = Topology::kStandalone;
  o.nodes.clear();
  o.require_primary = false;
  return o;
}

Impl::Node* Impl::find_node(const NodeAddress& address) const {
  for (const auto& node : nodes_) {
    if (node->address == address) return node.get();
  }
  return nullptr;
}

Impl::Node& Impl::node_for(const NodeAddress& address) {
  if (Node* node = find_node(address)) return *node;
  auto node = std::make_unique<Node>();
  node->address = address;
  node->label = format_address(address.host, address.port);
  node->client = std::make_unique<SingleNodeClient>(ex_, node_options(address));
  for (const auto& [sha, script] : scripts_) node->client->load_script(script);
  node->client->connect([self = shared_from_this(), address](std::error_code ec) {
    self->on_node_connect(address, ec);
  });
  Node& out = *node;
  std::lock_guard lock(nodes_mutex_);
  nodes_.push_back(std::move(node));
  return out;
}

void Impl::on_node_connect(const NodeAddress& address, std::error_code ec) {
  if (closed_) return;
  Node* node = find_node(address);
  if (ec && node) set_error(ec, node->label + ": " + node->client->last_error_message());
  update_state();
  if (ec && state() != State::kReady) notify_waiters(ec);
}

void Impl::sync_nodes() {
  const auto primaries = map_.primaries();
  const auto now = Clock::now();
  {
    // Primaries that own no slot any more are closed once their in-flight
    // commands could have finished.
    std::lock_guard lock(nodes_mutex_);
    auto keep = std::stable_partition(nodes_.begin(), nodes_.end(), [&](const auto& node) {
      return std::find(primaries.begin(), primaries.end(), node->address) != primaries.end();
    });
    for (auto it = keep; it != nodes_.end(); ++it) {
      retiring_.push_back({std::move(*it), now + 2 * opts_.command_timeout});
    }
    nodes_.erase(keep, nodes_.end());
  }
  for (const NodeAddress& primary : primaries) node_for(primary);
  for (const auto& node : nodes_) node->slots = 0;
  const NodeAddress* last = nullptr;
  std::uint16_t index = kNoNode;
  unowned_ = 0;
  for (std::uint16_t slot = 0; slot < cluster::kSlotCount; ++slot) {
    const NodeAddress* owner = map_.owner(slot);
    if (!owner) {
      route_[slot] = kNoNode;
      ++unowned_;
      continue;
    }
    if (owner != last) {
      last = owner;
      const auto it = std::find_if(nodes_.begin(), nodes_.end(),
                                   [&](const auto& node) { return node->address == *owner; });
      index = static_cast<std::uint16_t>(it - nodes_.begin());
    }
    route_[slot] = index;
    ++nodes_[index]->slots;
  }
}

void Impl::on_moved(std::uint16_t slot, Node& node) {
  map_.move(slot, node.address);
  const std::uint16_t old = route_[slot];
  if (old == kNoNode) {
    --unowned_;
  } else {
    --nodes_[old]->slots;
  }
  const auto it =
      std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& n) { return n.get() == &node; });
  route_[slot] = static_cast<std::uint16_t>(it - nodes_.begin());
  ++node.slots;
}

// --- readiness --------------------------------------------------------------

void Impl::arm_tick() {
  tick_timer_.expires_after(kTick);
  tick_timer_.async_wait([self = shared_from_this()](const boost::system::error_code&) {
    if (!self->closed_) self->on_tick();
  });
}

void Impl::on_tick() {
  const auto now = Clock::now();
  {
    std::lock_guard lock(nodes_mutex_);
    std::erase_if(retiring_, [&](Retiring& r) {
      if (r.close_at > now) return false;
      retired_stats_ += r.node->client->stats();
      r.node->client->close();
      return true;
    });
  }
  update_state();
  // A primary that cannot be reached may have been replaced: look again
  // soon even when no command for its slots asks for it.
  const bool unreachable = std::any_of(nodes_.begin(), nodes_.end(), [](const auto& node) {
    return node->slots != 0 && node->client->state() == State::kBackoff;
  });
  if (unreachable) {
    pacer_.want(now + std::min(opts_.topology_refresh, opts_.backoff_max),
                "an unreachable primary");
    arm_refresh_timer();
  }
  arm_tick();
}

void Impl::update_state() {
  if (closed_) return;
  bool all_ready = have_map_ && unowned_ == 0;
  for (const auto& node : nodes_) {
    const bool ready = node->client->state() == State::kReady;
    if (node->was_ready && !ready) {
      set_error(node->client->last_error(),
                node->label + ": " + node->client->last_error_message());
      request_refresh("a connection lost");
    }
    node->was_ready = ready;
    if (node->slots != 0 && !ready) all_ready = false;
  }
  State s = State::kReady;
  if (!all_ready) {
    s = have_map_ || pacer_.in_flight() || refresh_failures_ == 0 ? State::kConnecting
                                                                  : State::kBackoff;
  }
  state_.store(s, std::memory_order_relaxed);
  if (s == State::kReady) notify_waiters({});
}

void Impl::notify_waiters(std::error_code ec) {
  for (ConnectHandler& waiter : waiters_) {
    asio::post(ex_, [h = std::move(waiter), ec] { h(ec); });
  }
  waiters_.clear();
}

void Impl::set_error(std::error_code ec, std::string message) {
  last_error_ = ec;
  last_error_message_ = std::move(message);
}

}  // namespace sluice::redis
