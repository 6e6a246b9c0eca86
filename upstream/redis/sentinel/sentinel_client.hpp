// The Client for a primary watched by Redis Sentinel: the primary's address
// is asked of the sentinels (options().host:port and options().nodes, in
// order, each over a short connection of its own; the first address wins),
// checked with ROLE in the handshake, and asked again after the connection to
// it is lost or a connect attempt fails, after a READONLY reply (it was
// demoted), and taken from a +switch-master event of the subscription kept
// open to one sentinel. Commands go to the primary only, over one pipelined
// SingleNodeClient with the usual deadlines, TLS and ACL; while no primary is
// known, or a new one is not ready yet, they fail at once with kNotConnected.
// A replaced connection finishes the commands it carries and is closed after
// command_timeout * 2. Sentinels are reached with sentinel_user /
// sentinel_password and the same TLS settings as the data nodes. Used on one
// executor, like every Client; completions are posted to it.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>

#include "upstream/redis/client.hpp"

namespace sluice::redis {

class SentinelClient final : public Client {
 public:
  SentinelClient(boost::asio::any_io_executor executor, Options options);
  ~SentinelClient() override;
  SentinelClient(const SentinelClient&) = delete;
  SentinelClient& operator=(const SentinelClient&) = delete;

  void connect(ConnectHandler handler = {}) override;
  void connect_now(ConnectHandler handler = {}) override;
  void command(std::vector<std::string> args, Handler handler) override;
  void evalsha_late(const Script& script, std::vector<std::string> keys,
                    std::vector<std::string> args, Handler handler,
                    std::shared_ptr<const LateReplyHandler> late) override;
  void evalsha(const Script& script, std::vector<std::string> keys, std::vector<std::string> args,
               Handler handler) override;
  void load_script(const Script& script) override;
  void close() override;

  State state() const override;  // the primary connection's state; any thread
  Stats stats() const override;  // any thread
  std::error_code last_error() const override;
  std::string last_error_message() const override;
  const Options& options() const override;
  std::vector<NodeStatus> nodes() const override;  // the primary, then each sentinel

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::redis
