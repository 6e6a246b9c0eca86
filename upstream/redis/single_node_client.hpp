// The Client for one Redis server: one connection, owned by and used only on
// the executor it was made with (the worker's), so it takes no lock. hiredis
// only encodes commands and decodes replies; Asio does the I/O over plain TCP
// or TLS. Commands issued while a write is in flight go out together in the
// next write (automatic pipelining) and replies are matched in order. Every
// command has a deadline; the connection has an explicit state and reconnects
// with capped backoff. Completions are posted to that executor.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <memory>

#include "upstream/redis/client.hpp"
#include "upstream/redis/command_queue.hpp"

namespace sluice::redis {

class SingleNodeClient final : public Client {
 public:
  SingleNodeClient(boost::asio::any_io_executor executor, Options options);
  ~SingleNodeClient() override;
  SingleNodeClient(const SingleNodeClient&) = delete;
  SingleNodeClient& operator=(const SingleNodeClient&) = delete;

  void connect(ConnectHandler handler = {}) override;
  void connect_now(ConnectHandler handler = {}) override;
  void command(std::vector<std::string> args, Handler handler) override;
  void evalsha_late(const Script& script, std::vector<std::string> keys,
                    std::vector<std::string> args, Handler handler,
                    std::shared_ptr<const LateReplyHandler> late) override;
  void evalsha(const Script& script, std::vector<std::string> keys, std::vector<std::string> args,
               Handler handler) override;
  void load_script(const Script& script) override;

  // As command() and evalsha(), with the deadline given rather than now +
  // command_timeout: for a caller whose deadline covers several attempts
  // (a Cluster redirect, a Sentinel failover).
  using TimePoint = std::chrono::steady_clock::time_point;
  void command_until(TimePoint deadline, std::vector<std::string> args, Handler handler);
  void evalsha_until(TimePoint deadline, const Script& script, std::vector<std::string> keys,
                     std::vector<std::string> args, Handler handler);
  // As evalsha_until, with the keys and arguments (and numkeys and body)
  // already in `call`, which is shared rather than moved: for a caller that
  // may resend the same call to another node (a Cluster redirect) without
  // copying it. `call` must not change while any node holds it.
  void evalsha_shared(TimePoint deadline, const Script& script,
                      std::shared_ptr<CommandQueue::ScriptCall> call, Handler handler);

  // What happened to the connection, for an owner that picks the server (a
  // Sentinel client): a connect attempt failed, a ready connection was lost,
  // or a command got an error reply (detail: Redis' message). Called on the
  // executor from inside the client's own handlers, so it must not destroy
  // the client; set once, before connecting.
  enum class Event { kConnectFailed, kConnectionLost, kErrorReply };
  using EventHandler = std::function<void(Event, std::string_view detail)>;
  void on_event(EventHandler handler);

  void close() override;

  State state() const override;
  Stats stats() const override;
  std::error_code last_error() const override;
  std::string last_error_message() const override;
  const Options& options() const override;
  std::vector<NodeStatus> nodes() const override;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Makes SingleNodeClients on `executor`.
ClientFactory single_node_factory(boost::asio::any_io_executor executor);

}  // namespace sluice::redis
