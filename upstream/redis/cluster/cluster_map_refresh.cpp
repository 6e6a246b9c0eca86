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
  if (closed_ || pacer_.in_flight() || pacer_.due() >= refresh_timer_.at) return;
  refresh_timer_.at = pacer_.due();
  refresh_timer_.timer.expires_at(refresh_timer_.at);
  refresh_timer_.timer.async_wait(
      [self = shared_from_this(), seq = ++refresh_timer_.seq](const boost::system::error_code&) {
        if (seq != self->refresh_timer_.seq || self->closed_) return;
        self->refresh_timer_.at = Clock::time_point::max();
        const auto now = Clock::now();
        if (self->pacer_.can_start(now)) return self->start_refresh(self->pacer_.start(now));
        self->arm_refresh_timer();
      });
}

void Impl::start_refresh(const char* reason) {
  refresh_.reason = reason;
  refresh_.candidates =
      cluster::refresh_candidates(seeds_, map_.primaries(), [&](const NodeAddress& a) {
        const Node* node = find_node(a);
        return node && node->client->state() == State::kReady;
      });
  refresh_.next_candidate = 0;
  refresh_.errors.clear();
  ++refresh_.seq;
  update_state();
  try_candidate();
}

void Impl::try_candidate() {
  if (closed_) return;
  refresh_.asked = nullptr;
  if (refresh_.next_candidate == refresh_.candidates.size()) return refresh_failed();
  const NodeAddress address = refresh_.candidates[refresh_.next_candidate++];
  // A primary's own ready connection is asked directly; any other node over
  // a probe connection with the same credentials and TLS.
  if (Node* node = find_node(address); node && node->client->state() == State::kReady) {
    refresh_.asked = node->client.get();
    return ask_map(address, true);
  }
  refresh_.asked = &probe_for(address);
  refresh_.asked->connect_now(
      [self = shared_from_this(), seq = refresh_.seq, address](std::error_code ec) {
        if (seq != self->refresh_.seq || self->closed_) return;
        if (ec) return self->candidate_failed(address, self->refresh_.asked->last_error_message());
        self->ask_map(address, true);
      });
}

SingleNodeClient& Impl::probe_for(const NodeAddress& address) {
  // Probes are kept while refreshes fail, so that a bad seed is warned
  // about once per streak (by its client) rather than on every attempt,
  // and dropped once a map was learned.
  for (const auto& [at, probe] : refresh_.probes) {
    if (at == address) return *probe;
  }
  refresh_.probes.emplace_back(address,
                               std::make_unique<SingleNodeClient>(ex_, node_options(address)));
  return *refresh_.probes.back().second;
}

void Impl::close_probes() {
  for (const auto& [at, probe] : refresh_.probes) probe->close();
  refresh_.probes.clear();
}

void Impl::ask_map(const NodeAddress& address, bool shards) {
  std::vector<std::string> args{"CLUSTER", shards ? "SHARDS" : "SLOTS"};
  refresh_.asked->command_until(Clock::now() + opts_.connect_timeout, std::move(args),
                                [self = shared_from_this(), seq = refresh_.seq, address, shards](
                                    std::error_code ec, Reply reply) {
                                  if (seq != self->refresh_.seq || self->closed_) return;
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
  if (!refresh_.errors.empty()) refresh_.errors += "; ";
  const std::string label = format_address(address.host, address.port);
  // A connect error already names the address.
  if (why.find(label) == std::string::npos) refresh_.errors += label + ": ";
  refresh_.errors += why;
  // The next candidate is tried from a fresh handler, not from inside the
  // completion chain of the client that failed.
  asio::post(ex_, [self = shared_from_this(), seq = refresh_.seq] {
    if (seq == self->refresh_.seq) self->try_candidate();
  });
}

void Impl::apply_map(cluster::SlotMap map) {
  const std::string change = cluster::describe_change(refreshed_map_, map);
  pacer_.finish(!change.empty());
  ++refresh_.seq;
  refresh_.asked = nullptr;
  close_probes();
  bump(counters_.topology_refresh_ok);
  backoff_.reset();
  refresh_failures_ = 0;
  if (!change.empty()) {
    bump(counters_.topology_changes);
    spdlog::info("redis cluster: slot map changed after {}: {}", refresh_.reason, change);
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
  ++refresh_.seq;
  bump(counters_.topology_refresh_error);
  set_error(Error::kConnect, "no seed node gave a slot map: " + refresh_.errors);
  // Warn once per streak of failures; the retries are logged at debug.
  const auto level = ++refresh_failures_ == 1 ? spdlog::level::warn : spdlog::level::debug;
  spdlog::log(level, "redis cluster: {}", last_error_message_);
  pacer_.want(Clock::now() + backoff_.next(), "a failed refresh");
  arm_refresh_timer();
  update_state();
  if (state() != State::kReady) notify_waiters(Error::kConnect);
}

}  // namespace sluice::redis
