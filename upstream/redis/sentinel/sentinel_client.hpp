// The Client for a primary watched by Redis Sentinel: the primary's address
// is asked of the sentinels (options().host:port and options().nodes, the
// first that answers SENTINEL GET-MASTER-ADDR-BY-NAME), checked with ROLE in
// the handshake, and asked again after the connection to it is lost, after a
// READONLY reply (it was demoted) and on a +switch-master event from a
// subscription kept open to one sentinel. Commands go to the primary only,
// over one pipelined SingleNodeClient with the usual deadlines, TLS and ACL;
// while no primary is known they fail at once with kNotConnected. Used on
// one executor, like every Client; completions are posted to it.
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
