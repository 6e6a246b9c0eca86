// ClusterClient's slot map: asked of the seeds and then the known primaries
// (CLUSTER SHARDS, or CLUSTER SLOTS where SHARDS is unknown), over a
// primary's own connection or a short-lived one; refreshed when asked (paced
// and coalesced), periodically, and with capped backoff after a failure.
// A changed map is logged in one line with the reason of the refresh.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "upstream/redis/cluster/cluster_impl.hpp"

namespace sluice::redis {

namespace asio = boost::asio;
using Impl = ClusterClient::Impl;

namespace {
bool unknown_subcommand(const Reply& reply) {
  std::string text = reply.str;
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text.find("unknown subcommand") != std::string::npos;
}
}  // namespace

void Impl::start() {
  if (started_) return;
  started_ = true;
  arm_tick();
}

void Impl::request_refresh(const char* reason) {
  if (closed_) return;
  start();
  pacer_.want(Clock::now(), reason);
  arm_refresh_timer();
}

void Impl::arm_refresh_timer() {
  // Always through the timer, so that a refresh never starts inside the
  // caller's own call.
  if (closed_ || pacer_.in_flight() || pacer_.due() >= refresh_timer_at_) return;
  refresh_timer_at_ = pacer_.due();
  refresh_timer_.expires_at(refresh_timer_at_);
  refresh_timer_.async_wait(
      [self = shared_from_this(), seq = ++refresh_timer_seq_](const boost::system::error_code&) {
        if (seq != self->refresh_timer_seq_ || self->closed_) return;
        self->refresh_timer_at_ = Clock::time_point::max();
        const auto now = Clock::now();
        if (self->pacer_.can_start(now)) return self->start_refresh(self->pacer_.start(now));
        self->arm_refresh_timer();
      });
}

void Impl::start_refresh(const char* reason) {
  refresh_reason_ = reason;
  candidates_ = cluster::refresh_candidates(seeds_, map_.primaries(), [&](const NodeAddress& a) {
    const Node* node = find_node(a);
    return node && node->client->state() == State::kReady;
  });
  next_candidate_ = 0;
  candidate_errors_.clear();
  ++refresh_seq_;
  update_state();
  try_candidate();
}

void Impl::try_candidate() {
  if (closed_) return;
  asked_ = nullptr;
  if (next_candidate_ == candidates_.size()) return refresh_failed();
  const NodeAddress address = candidates_[next_candidate_++];
  // A primary's own ready connection is asked directly; any other node over
  // a probe connection with the same credentials and TLS.
  if (Node* node = find_node(address); node && node->client->state() == State::kReady) {
    asked_ = node->client.get();
    return ask_map(address, true);
  }
  asked_ = &probe_for(address);
  asked_->connect_now([self = shared_from_this(), seq = refresh_seq_, address](std::error_code ec) {
    if (seq != self->refresh_seq_ || self->closed_) return;
    if (ec) return self->candidate_failed(address, self->asked_->last_error_message());
    self->ask_map(address, true);
  });
}

SingleNodeClient& Impl::probe_for(const NodeAddress& address) {
  // Probes are kept while refreshes fail, so that a bad seed is warned
  // about once per streak (by its client) rather than on every attempt,
  // and dropped once a map was learned.
  for (const auto& [at, probe] : probes_) {
    if (at == address) return *probe;
  }
  probes_.emplace_back(address, std::make_unique<SingleNodeClient>(ex_, node_options(address)));
  return *probes_.back().second;
}

void Impl::close_probes() {
  for (const auto& [at, probe] : probes_) probe->close();
  probes_.clear();
}

void Impl::ask_map(const NodeAddress& address, bool shards) {
  std::vector<std::string> args{"CLUSTER", shards ? "SHARDS" : "SLOTS"};
  asked_->command_until(Clock::now() + opts_.connect_timeout, std::move(args),
                        [self = shared_from_this(), seq = refresh_seq_, address, shards](
                            std::error_code ec, Reply reply) {
                          if (seq != self->refresh_seq_ || self->closed_) return;
                          self->on_map_reply(address, shards, ec, std::move(reply));
                        });
}

void Impl::on_map_reply(const NodeAddress& address, bool shards, std::error_code ec, Reply reply) {
  // A server older than CLUSTER SHARDS is asked for CLUSTER SLOTS.
  if (shards && ec == Error::kServer && unknown_subcommand(reply)) return ask_map(address, false);
  if (ec && ec != Error::kServer) return candidate_failed(address, ec.message());
  std::string error;
  auto map = shards ? cluster::SlotMap::from_shards(reply, address.host, opts_.tls, error)
                    : cluster::SlotMap::from_slots(reply, address.host, error);
  if (!map) return candidate_failed(address, error);
  if (map->unowned_slots() == cluster::kSlotCount) {
    return candidate_failed(address, "knows no owner of any slot");
  }
  apply_map(std::move(*map));
}

void Impl::candidate_failed(const NodeAddress& address, std::string why) {
  if (!candidate_errors_.empty()) candidate_errors_ += "; ";
  const std::string label = format_address(address.host, address.port);
  // A connect error already names the address.
  if (why.find(label) == std::string::npos) candidate_errors_ += label + ": ";
  candidate_errors_ += why;
  // The next candidate is tried from a fresh handler, not from inside the
  // completion chain of the client that failed.
  asio::post(ex_, [self = shared_from_this(), seq = refresh_seq_] {
    if (seq == self->refresh_seq_) self->try_candidate();
  });
}

void Impl::apply_map(cluster::SlotMap map) {
  const std::string change = cluster::describe_change(refreshed_map_, map);
  pacer_.finish(!change.empty());
  ++refresh_seq_;
  asked_ = nullptr;
  close_probes();
  bump(counters_.topology_refresh_ok);
  backoff_.reset();
  refresh_failures_ = 0;
  if (!change.empty()) {
    bump(counters_.topology_changes);
    spdlog::info("redis cluster: slot map changed after {}: {}", refresh_reason_, change);
  }
  refreshed_map_ = map;
  map_ = std::move(map);
  have_map_ = true;
  sync_nodes();
  // A map with slots nobody serves is asked for again soon (a failover
  // under way), a complete one periodically.
  const bool complete = unowned_ == 0;
  pacer_.want(Clock::now() + (complete ? opts_.topology_refresh
                                       : std::min(opts_.topology_refresh, opts_.backoff_max)),
              complete ? "periodic refresh" : "an incomplete map");
  arm_refresh_timer();
  update_state();
}

void Impl::refresh_failed() {
  pacer_.finish(false);
  ++refresh_seq_;
  bump(counters_.topology_refresh_error);
  set_error(Error::kConnect, "no seed node gave a slot map: " + candidate_errors_);
  // Warn once per streak of failures; the retries are logged at debug.
  const auto level = ++refresh_failures_ == 1 ? spdlog::level::warn : spdlog::level::debug;
  spdlog::log(level, "redis cluster: {}", last_error_message_);
  pacer_.want(Clock::now() + backoff_.next(), "a failed refresh");
  arm_refresh_timer();
  update_state();
  if (state() != State::kReady) notify_waiters(Error::kConnect);
}

}  // namespace sluice::redis
