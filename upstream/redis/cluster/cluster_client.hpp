// The Client for a Redis Cluster: the slot map learned from any seed node
// (CLUSTER SHARDS, or CLUSTER SLOTS where that is all a server has), one
// pipelined SingleNodeClient per primary, and each evalsha sent to the owner
// of its keys' slot (all keys of one call must share a slot). MOVED updates
// the map and resends to the new owner, ASK resends once after ASKING,
// TRYAGAIN resends after a short pause, all inside the command's deadline
// (options().command_timeout from the first send). The map is refreshed after
// a redirect, after a node's connection is lost, and every
// options().topology_refresh. A slot without a reachable owner fails the
// commands that need it (kNotConnected, at once) and only those; CLUSTERDOWN
// is a kServer failure (the other slots keep serving only where the servers
// run with cluster-require-full-coverage no). Used on one executor, like
// every Client; completions are posted to it.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>

#include "upstream/redis/client.hpp"

namespace sluice::redis {

class ClusterClient final : public Client {
 public:
  ClusterClient(boost::asio::any_io_executor executor, Options options);
  ~ClusterClient() override;
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  // connect(): learns the map and connects to every primary; the handler gets
  // success once every slot has a ready owner (or an error from the attempt).
  void connect(ConnectHandler handler = {}) override;
  void connect_now(ConnectHandler handler = {}) override;
  // command() without keys goes to any ready primary (PING, say).
  void command(std::vector<std::string> args, Handler handler) override;
  void keyed_command(std::vector<std::string> args, Handler handler) override;
  void evalsha_late(const Script& script, std::vector<std::string> keys,
                    std::vector<std::string> args, Handler handler,
                    std::shared_ptr<const LateReplyHandler> late) override;
  void evalsha(const Script& script, std::vector<std::string> keys, std::vector<std::string> args,
               Handler handler) override;
  void evalsha_unredirected(const Script& script, std::vector<std::string> keys,
                            std::vector<std::string> args, Handler handler,
                            std::shared_ptr<const LateReplyHandler> late) override;
  void load_script(const Script& script) override;
  void close() override;

  // kReady only when every one of the 16384 slots has an owner whose
  // connection is ready; any thread.
  State state() const override;
  Stats stats() const override;  // any thread: the sum over the nodes, plus redirects/refreshes
  std::error_code last_error() const override;
  std::string last_error_message() const override;
  const Options& options() const override;
  std::vector<NodeStatus> nodes() const override;  // one per primary in the map
  bool routes_by_slot() const override { return true; }
  std::optional<std::size_t> slot_owner(std::uint16_t slot) const override;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::redis
