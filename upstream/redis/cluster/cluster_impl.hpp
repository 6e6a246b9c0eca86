// The state of a ClusterClient, shared by its three parts: cluster_client.cpp
// (routing each command to its slot's owner and following redirects),
// cluster_map_refresh.cpp (learning the slot map) and cluster_topology.cpp
// (the node clients, the slot -> node table, readiness).
// The handle owns it through a shared_ptr and every pending handler holds it.
// On the client's executor only, except state() and stats(), which any
// thread may read (the node list is changed under nodes_mutex_ for them).
#pragma once

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "upstream/redis/backoff.hpp"
#include "upstream/redis/cluster/cluster_client.hpp"
#include "upstream/redis/cluster/refresh.hpp"
#include "upstream/redis/cluster/slot.hpp"
#include "upstream/redis/cluster/redirect.hpp"
#include "upstream/redis/cluster/slot_map.hpp"
#include "upstream/redis/single_node_client.hpp"

namespace sluice::redis {

class ClusterClient::Impl : public std::enable_shared_from_this<Impl> {
 public:
  using Clock = std::chrono::steady_clock;
  using NodeAddress = cluster::NodeAddress;

  // One primary and its pipelined connection.
  struct Node {
    NodeAddress address;
    std::string label;  // host:port
    std::unique_ptr<SingleNodeClient> client;
    std::size_t slots = 0;  // slots it owns in map_
    bool was_ready = false;
  };
  // A primary that owns no slot any more, closed once its in-flight commands
  // could have finished.
  struct Retiring {
    std::unique_ptr<Node> node;
    Clock::time_point close_at;
  };

  // One routed evalsha: its arguments (shared with the node that sends it,
  // never copied) and where it stands.
  struct Call {
    const Script* script = nullptr;
    CommandQueue::ScriptCall args;
    Handler handler;
    Clock::time_point deadline;
    std::uint16_t slot = 0;
    unsigned resends = 0;
    NodeAddress at;                                    // the node it was last sent to
    std::unique_ptr<boost::asio::steady_timer> timer;  // only while waiting (TRYAGAIN, connect)
    std::uint64_t wait_seq = 0;
  };
  using CallPtr = std::shared_ptr<Call>;

  Impl(boost::asio::any_io_executor ex, Options options);

  // Public operations and routing (cluster_client.cpp).
  void connect(ConnectHandler handler, bool now);
  void command(std::vector<std::string> args, Handler handler);
  // The owner of `slot` when its connection is ready; else nullptr, and a
  // fresh map is asked for.
  Node* ready_owner(std::uint16_t slot);
  // A reply to a call sent without following redirects: a MOVED or ASK asks
  // for a fresh map (`why`) and is named; anything else is nullopt.
  std::optional<cluster::Redirect::Kind> unfollowed_redirect(std::error_code ec,
                                                             const Reply& reply, const char* why);
  void keyed_command(std::vector<std::string> args, Handler handler);
  void evalsha_unredirected(const Script& script, std::vector<std::string> keys,
                            std::vector<std::string> args, Handler handler,
                            std::shared_ptr<const Client::LateReplyHandler> late);
  void evalsha(const Script& script, std::vector<std::string> keys, std::vector<std::string> args,
               Handler handler, std::shared_ptr<const Client::LateReplyHandler> late = nullptr);
  void load_script(const Script& script);
  void close();
  Stats stats() const;
  std::vector<NodeStatus> nodes() const;

  const Script* remember_script(const Script& script);
  Node* any_ready_node() const;
  void fail_fast(Handler handler, Error error);
  void send(const CallPtr& call, Node& node, bool asking);
  void on_reply(const CallPtr& call, std::error_code ec, Reply reply);
  void resend(const CallPtr& call, Node& node, bool asking);
  void retry_later(const CallPtr& call);
  void wait_for_node(const CallPtr& call, Node& node, bool asking);
  void park(const CallPtr& call, Clock::time_point until);
  void unpark(const CallPtr& call);
  void give_up(const CallPtr& call, Error error);  // counted as ours
  void complete(const CallPtr& call, std::error_code ec, Reply reply = {});

  // Nodes, readiness (cluster_topology.cpp) and the map (cluster_map_refresh.cpp).
  Options node_options(const NodeAddress& address) const;
  Node* find_node(const NodeAddress& address) const;
  Node& node_for(const NodeAddress& address);
  void on_node_connect(const NodeAddress& address, std::error_code ec);
  void start();
  void request_refresh(const char* reason);
  void arm_refresh_timer();
  void start_refresh(const char* reason);
  void try_candidate();
  SingleNodeClient& probe_for(const NodeAddress& address);
  void close_probes();
  void ask_map(const NodeAddress& address, bool shards);
  void on_map_reply(const NodeAddress& address, bool shards, std::error_code ec, Reply reply);
  void candidate_failed(const NodeAddress& address, std::string why);
  void apply_map(cluster::SlotMap map);
  void refresh_failed();
  void sync_nodes();
  void on_moved(std::uint16_t slot, Node& node);
  void arm_tick();
  void on_tick();
  void update_state();
  void notify_waiters(std::error_code ec);
  void set_error(std::error_code ec, std::string message);

  State state() const { return state_.load(std::memory_order_relaxed); }
  static void bump(std::atomic<std::uint64_t>& counter) {
    counter.fetch_add(1, std::memory_order_relaxed);
  }

  boost::asio::any_io_executor ex_;
  const Options opts_;
  std::vector<NodeAddress> seeds_;
  std::atomic<State> state_{State::kDisconnected};
  bool started_ = false;
  bool closed_ = false;

  // The map commands are routed by (corrected by MOVED), and the map as the
  // last refresh learned it (what the next refresh is compared with).
  bool have_map_ = false;
  cluster::SlotMap map_;
  cluster::SlotMap refreshed_map_;
  std::size_t unowned_ = cluster::kSlotCount;
  static constexpr std::uint16_t kNoNode = 0xffff;
  std::vector<std::uint16_t> route_;  // per slot: index into nodes_, or kNoNode

  mutable std::mutex nodes_mutex_;  // guards changes of nodes_, retiring_, retired_stats_
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Retiring> retiring_;
  Stats retired_stats_;

  std::unordered_map<std::string, Script> scripts_;  // sha1 -> script, for every node
  std::vector<ConnectHandler> waiters_;
  std::vector<CallPtr> parked_;  // calls waiting on their timer

  // The refresh in flight: why it started, the candidates to ask in order
  // and why each failed, and the connection being asked. seq grows as one
  // starts and as it ends, so that the answers of an older one are ignored.
  struct Refresh {
    const char* reason = "";
    std::vector<NodeAddress> candidates;
    std::size_t next_candidate = 0;
    std::string errors;
    // Connections to candidates that are not ready primaries (seeds, say).
    std::vector<std::pair<NodeAddress, std::unique_ptr<SingleNodeClient>>> probes;
    SingleNodeClient* asked = nullptr;  // the probe or the node client being asked
    std::uint64_t seq = 0;
  };
  // The wake-up for the next refresh, armed for `at`; seq grows with each
  // arming, so that the handler of an earlier one does nothing.
  struct RefreshTimer {
    explicit RefreshTimer(const boost::asio::any_io_executor& ex) : timer(ex) {}
    boost::asio::steady_timer timer;
    Clock::time_point at = Clock::time_point::max();
    std::uint64_t seq = 0;
  };
  cluster::RefreshPacer pacer_;
  Refresh refresh_;
  Backoff backoff_;
  std::uint64_t refresh_failures_ = 0;
  RefreshTimer refresh_timer_;
  boost::asio::steady_timer tick_timer_;

  std::error_code last_error_;
  std::string last_error_message_;

  struct Counters {
    std::atomic<std::uint64_t> not_connected{0}, timeouts{0}, redirects_moved{0}, redirects_ask{0},
        topology_refresh_ok{0}, topology_refresh_error{0}, topology_changes{0};
  };
  Counters counters_;
};

}  // namespace sluice::redis
