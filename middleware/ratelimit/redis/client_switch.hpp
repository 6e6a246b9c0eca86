// The limiter's Redis connection, and its replacement when a reload changes
// the Redis settings: the new client connects beside the old one and takes
// over once it is ready (or once its connect timeout has passed). Decisions
// in flight on the old connection finish there, so a reload drops nothing.
// How the limiter addresses the client in use (by hash slot, with hash-tagged
// keys, on a Redis Cluster) is decided once, when that client is installed.
// Used on the limiter's executor, except current(), which any thread may read.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "middleware/ratelimit/redis/key_namer.hpp"
#include "upstream/redis/client.hpp"

namespace sluice {

class ClientSwitch {
 public:
  // `scripts` are loaded on every client, the first and each replacement;
  // they must outlive this object.
  ClientSwitch(boost::asio::any_io_executor executor, std::unique_ptr<redis::Client> first,
               redis::ClientFactory make_client, std::vector<const redis::Script*> scripts);

  // A client to send on, and how its calls are addressed.
  struct Route {
    redis::Client& client;
    KeyStyle keys;  // kHashTag: the client routes each call by hash slot (a cluster)
    bool by_slot() const { return keys == KeyStyle::kHashTag; }
  };

  // The client to send on now: the replacement if it has become ready.
  redis::Client& client() {
    maybe_switch();
    return *client_;
  }
  Route route() {
    maybe_switch();
    return Route{*client_, key_style_};
  }
  // The client in use, without switching.
  redis::Client& installed() const { return *client_; }
  // The client in use as other threads see it.
  const redis::Client& current() const { return *current_.load(); }
  // Whether the client in use routes each call by hash slot (a cluster).
  bool by_slot() const { return key_style_ == KeyStyle::kHashTag; }

  // Connects a replacement when `options` differ from those of the client
  // that is (or is becoming) current; true when it did.
  bool reconfigure(redis::Options options);

  // Counters of this client and every client it replaced, so totals never go down.
  redis::Stats stats() const;

  void close();

 private:
  void maybe_switch();
  void install(std::unique_ptr<redis::Client> next);
  void load_scripts(redis::Client& client) const;

  boost::asio::any_io_executor executor_;
  redis::ClientFactory make_client_;
  std::vector<const redis::Script*> scripts_;
  std::unique_ptr<redis::Client> client_;
  std::unique_ptr<redis::Client> pending_;  // after a reload to another Redis, until ready
  std::chrono::steady_clock::time_point pending_deadline_{};
  // Replaced clients, closed once their calls must have ended and kept until
  // this object goes, since other threads may still read their state.
  std::vector<std::unique_ptr<redis::Client>> retired_;
  std::atomic<redis::Client*> current_{nullptr};
  KeyStyle key_style_ = KeyStyle::kPlain;  // of client_
  redis::Stats carried_;
  // Lives as long as this object: the retire timers hold it weakly.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace sluice
