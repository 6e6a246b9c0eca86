// The consumer store's change events, for one process: one connection to a
// node of the store's Redis (the standalone server, the Sentinel primary, or
// any node of a Cluster, where events reach every node) subscribed to the
// store's channel. Each event, "<id> <fingerprint>...", makes every worker's
// cache forget those keys, so that every instance applies a change within a
// round trip. A subscription made again after a loss makes every cached
// entry stale first: changes made meanwhile were missed. Runs on one worker's
// executor and reconnects by itself, with a growing pause.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/config/config.hpp"
#include "upstream/redis/backoff.hpp"
#include "upstream/redis/client.hpp"
#include "upstream/redis/push_link.hpp"

namespace sluice {

// The fingerprints an event names, or nullopt when it is not an event of the
// store ("<id>" then fingerprints of 32 lower-case hex digits, space-separated).
std::optional<std::vector<std::string>> parse_change_event(std::string_view payload);

class ConsumerSubscription : public std::enable_shared_from_this<ConsumerSubscription> {
 public:
  // The servers of the store's connection (on this executor).
  using Nodes = std::function<std::vector<redis::NodeStatus>()>;
  // Every worker forgets these keys / makes every entry stale.
  using Forget = std::function<void(std::vector<std::string> fingerprints)>;
  using Stale = std::function<void()>;

  ConsumerSubscription(boost::asio::any_io_executor executor, Nodes nodes, Forget forget,
                       Stale stale);

  // Subscribes while `config` has the store on (again, on a new link, after
  // a reload); closes otherwise.
  void configure(const Config& config);
  void close();

  // Whether the subscription is open now (for tests and readiness).
  bool subscribed() const { return subscribed_; }

 private:
  void subscribe();
  void on_reply(std::uint64_t generation, const redis::Reply& reply);
  void on_down(std::uint64_t generation, std::string reason);

  boost::asio::any_io_executor executor_;
  Nodes nodes_;
  Forget forget_;
  Stale stale_;
  redis::Options options_;
  std::string channel_;
  bool enabled_ = false;
  bool subscribed_ = false;
  bool reported_ = false;  // the current run of failures was logged
  std::size_t next_node_ = 0;
  std::uint64_t generation_ = 0;  // of the link; replies of older links are ignored
  std::shared_ptr<redis::PushLink> link_;
  boost::asio::steady_timer retry_;
  redis::Backoff backoff_;
};

}  // namespace sluice
