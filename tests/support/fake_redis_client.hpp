// Test helper: a redis::Client whose every completion the test fires by hand.
// It records connects, commands and script calls; complete() and
// finish_connect() post the handler to the executor, as a real client does,
// so nothing completes inside the call that started it. Its state is set by
// the test. FakeRedisClients::factory() makes clients and keeps a pointer to
// each, so a test can reach the clients a limiter owns.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "upstream/redis/client.hpp"

namespace sluice::test {

class FakeRedisClient final : public redis::Client {
 public:
  struct Call {
    bool script = false;            // evalsha (else command)
    std::string sha1;               // evalsha only
    std::vector<std::string> keys;  // evalsha only
    std::vector<std::string> args;  // the command's arguments, or the script's ARGV
    Handler handler;                // empty once completed
  };

  FakeRedisClient(boost::asio::any_io_executor executor, redis::Options options)
      : executor_(std::move(executor)), options_(std::move(options)) {}

  void connect(ConnectHandler handler) override {
    ++connects;
    if (handler) connect_waiters.push_back(std::move(handler));
  }
  void connect_now(ConnectHandler handler) override { connect(std::move(handler)); }
  void command(std::vector<std::string> args, Handler handler) override {
    calls.push_back(Call{false, {}, {}, std::move(args), std::move(handler)});
  }
  void evalsha(const redis::Script& script, std::vector<std::string> keys,
               std::vector<std::string> args, Handler handler) override {
    calls.push_back(
        Call{true, script.sha1(), std::move(keys), std::move(args), std::move(handler)});
  }
  void load_script(const redis::Script& script) override { loaded.push_back(script.sha1()); }
  void close() override {
    closed = true;
    state_ = redis::State::kClosed;
  }

  redis::State state() const override { return state_; }
  redis::Stats stats() const override { return stats_; }
  std::error_code last_error() const override { return {}; }
  std::string last_error_message() const override { return {}; }
  const redis::Options& options() const override { return options_; }
  bool routes_by_slot() const override { return by_slot; }

  // ---- Test controls ----
  void set_state(redis::State state) { state_ = state; }
  redis::Stats& mutable_stats() { return stats_; }

  // Completes call `index` (posted).
  void complete(std::size_t index, std::error_code ec, redis::Reply reply = {}) {
    auto handler = std::move(calls.at(index).handler);
    calls.at(index).handler = nullptr;
    boost::asio::post(executor_, [handler = std::move(handler), ec, reply = std::move(reply)] {
      handler(ec, reply);
    });
  }
  // Completes every waiting connect handler (posted); success makes the client ready.
  void finish_connect(std::error_code ec) {
    if (!ec) state_ = redis::State::kReady;
    for (auto& waiter : connect_waiters) {
      boost::asio::post(executor_, [waiter = std::move(waiter), ec] { waiter(ec); });
    }
    connect_waiters.clear();
  }

  std::vector<Call> calls;
  std::vector<ConnectHandler> connect_waiters;
  std::vector<std::string> loaded;  // SHA-1s of load_script calls
  int connects = 0;
  bool closed = false;
  bool by_slot = false;  // acts as a Redis Cluster client

 private:
  boost::asio::any_io_executor executor_;
  redis::Options options_;
  redis::State state_ = redis::State::kDisconnected;
  redis::Stats stats_;
};

// Makes FakeRedisClients and remembers them (owned by whoever the factory hands them to).
struct FakeRedisClients {
  boost::asio::any_io_executor executor;
  std::vector<FakeRedisClient*> made;

  redis::ClientFactory factory() {
    return [this](redis::Options options) -> std::unique_ptr<redis::Client> {
      auto client = std::make_unique<FakeRedisClient>(executor, std::move(options));
      made.push_back(client.get());
      return client;
    };
  }
};

}  // namespace sluice::test
