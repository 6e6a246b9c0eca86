// The state of a SentinelClient, shared by its two halves:
// sentinel_client.cpp (the public operations, the primary connection and its
// replacement) and sentinel_discovery.cpp (asking the sentinels for the
// primary's address, and the +switch-master subscription). The handle owns it
// through a shared_ptr; the handlers of its timers, links and primary
// connections hold weak references. On the client's executor only, except
// state() and stats(), which any thread may read (view_mutex_ guards what they
// read of the primary connections; the executor never takes it per command).
#pragma once

#include <atomic>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "upstream/redis/backoff.hpp"
#include "upstream/redis/push_link.hpp"
#include "upstream/redis/sentinel/sentinel_client.hpp"
#include "upstream/redis/sentinel/sentinel_protocol.hpp"
#include "upstream/redis/single_node_client.hpp"

namespace sluice::redis {

class SentinelClient::Impl : public std::enable_shared_from_this<Impl> {
 public:
  using Clock = std::chrono::steady_clock;
  using Primary = std::shared_ptr<SingleNodeClient>;

  Impl(boost::asio::any_io_executor ex, Options options);

  // Public operations (sentinel_client.cpp).
  void connect(ConnectHandler handler, bool now);
  // The current primary connection, or nullptr after failing `handler` fast.
  SingleNodeClient* route(Handler& handler);
  void load_script(const Script& script);
  void close();
  State state() const;
  Stats stats() const;
  std::error_code last_error() const;
  std::string last_error_message() const;
  std::vector<NodeStatus> nodes() const;

  // The primary connection (sentinel_client.cpp).
  void start();
  void switch_primary(const Endpoint& address, std::string_view reason);
  void retire(Primary old);
  void on_primary_event(std::uint64_t generation, SingleNodeClient::Event event,
                        const std::string& detail);

  // Discovery (sentinel_discovery.cpp).
  void request_resolve(std::string reason);
  void resolve_now();
  void ask_sentinel(std::size_t index);
  void on_answer(std::size_t index, const Reply& reply);
  void on_sentinel_failed(std::size_t index, std::string reason);
  void resolve_succeeded(const Endpoint& address, std::string_view reason);
  void resolve_failed();
  void stop_resolve();
  void subscribe();
  void on_subscription_reply(std::size_t index, const Reply& reply);
  void on_subscription_down(std::size_t index, std::string reason);
  std::shared_ptr<PushLink> make_link(std::size_t index);

  struct Sentinel {
    Endpoint address;
    std::string name;        // host:port
    bool answered = false;   // the last exchange with it succeeded
    std::string last_error;  // why the last one failed
  };

  boost::asio::any_io_executor ex_;
  const Options opts_;
  Options data_opts_;  // the primary connection's: require_primary, no topology
  std::vector<Sentinel> sentinels_;
  std::string tls_setup_error_;
  std::shared_ptr<boost::asio::ssl::context> tls_ctx_;
  std::vector<Script> scripts_;
  std::vector<ConnectHandler> waiters_;  // connect() callers while no primary is known
  bool started_ = false;
  bool closed_ = false;
  std::atomic<State> own_state_{State::kDisconnected};  // while there is no primary

  // The primary connection and the ones it replaced (closed after
  // command_timeout * 2; their counters stay in retired_stats_).
  Primary primary_;
  std::optional<Endpoint> primary_address_;
  std::uint64_t generation_ = 0;  // of primary_; events of older ones are ignored
  struct Retiring {
    Primary client;
    std::shared_ptr<boost::asio::steady_timer> timer;
  };
  std::vector<Retiring> retiring_;
  Stats retired_stats_;
  mutable std::mutex view_mutex_;

  // Asking the sentinels, one after the other: the round under way (or, for
  // reason, the next one), its pacing, and why the last round failed.
  struct Round {
    bool running = false;
    std::string reason;
    std::vector<std::string> errors;  // "host:port: why", this round
    bool unknown_master = false;      // a sentinel answered nil this round
    std::shared_ptr<PushLink> query;
  };
  struct ResolveError {
    std::error_code code;  // set while the last resolve failed
    std::string message;
    std::uint64_t streak = 0;  // failed rounds in a row
  };
  Round round_;
  boost::asio::steady_timer resolve_timer_;
  bool resolve_timer_armed_ = false;
  Backoff resolve_backoff_;
  Clock::time_point last_resolve_end_{};
  ResolveError resolve_error_;

  // The +switch-master subscription, kept open on one sentinel at a time.
  struct Subscription {
    Subscription(const boost::asio::any_io_executor& ex, const Options& opts)
        : timer(ex), backoff(opts.backoff_initial, opts.backoff_max) {}
    std::shared_ptr<PushLink> link;
    std::size_t index = 0;  // of the sentinel it is (or will be) open on
    bool subscribed_once = false;
    boost::asio::steady_timer timer;
    Backoff backoff;
  };
  Subscription subscription_;

  // Counted here, added to the connections' own in stats().
  struct Counters {
    std::atomic<std::uint64_t> refresh_ok{0}, refresh_error{0}, changes{0}, not_connected{0};
  };
  Counters counters_;
};

}  // namespace sluice::redis
