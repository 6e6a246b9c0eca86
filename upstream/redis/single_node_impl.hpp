// The state of a SingleNodeClient, shared by its two halves:
// single_node_connect.cpp (the connect / handshake / backoff state machine)
// and single_node_client.cpp (commands, pipelined writes, replies, deadlines).
// The handle owns it through a shared_ptr and every pending handler holds it,
// so it outlives its own operations. On the client's executor only, except
// state() and stats(), which any thread may read.
#pragma once

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "upstream/redis/backoff.hpp"
#include "upstream/redis/command_queue.hpp"
#include "upstream/redis/connection.hpp"
#include "upstream/redis/single_node_client.hpp"

namespace sluice::redis {

class SingleNodeClient::Impl : public std::enable_shared_from_this<Impl> {
 public:
  using Clock = std::chrono::steady_clock;
  using Kind = CommandQueue::Kind;
  using Event = SingleNodeClient::Event;

  Impl(boost::asio::any_io_executor ex, Options options);

  // Public operations (single_node_client.cpp).
  void connect(ConnectHandler handler);
  void connect_now(ConnectHandler handler);
  // deadline max() = now + command_timeout.
  void command(std::vector<std::string> args, Handler handler,
               Clock::time_point deadline = Clock::time_point::max());
  void evalsha(const Script& script, std::vector<std::string> keys, std::vector<std::string> args,
               Handler handler, Clock::time_point deadline = Clock::time_point::max(),
               std::shared_ptr<const LateReplyHandler> late = nullptr);
  void evalsha_call(const Script& script, std::shared_ptr<CommandQueue::ScriptCall> call,
                    Handler handler, Clock::time_point deadline);
  void load_script(const Script& script);
  void close();

  State state() const { return state_.load(std::memory_order_relaxed); }
  Stats stats() const;

  using ConnPtr = std::shared_ptr<Connection>;

  struct Counters {
    std::atomic<std::uint64_t> commands_sent{0}, writes{0}, replies{0}, timeouts{0},
        late_replies{0}, not_connected{0}, server_errors{0}, noscript_retries{0}, connects{0},
        connect_failures{0}, reconnects{0}, protocol_errors{0};
  };
  static void bump(std::atomic<std::uint64_t>& counter, std::uint64_t n = 1) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }

  // Connection lifecycle (single_node_connect.cpp).
  void start_connect();
  void on_resolve(const ConnPtr& conn, const boost::system::error_code& ec,
                  const boost::asio::ip::tcp::resolver::results_type& results);
  void on_tcp_connect(const ConnPtr& conn, const boost::system::error_code& ec);
  void on_tls_handshake(const ConnPtr& conn, const boost::system::error_code& ec);
  void start_handshake();
  void on_internal_reply(Kind kind, const Reply& reply);
  void become_ready();
  void fail_connect(Error error, std::string detail);
  void drop_connection(Error error, std::string detail);
  void on_connection_error(Error error, std::string detail);
  void schedule_reconnect();
  void teardown();
  void set_state(State s) { state_.store(s, std::memory_order_relaxed); }
  void emit(Event event, std::string_view detail) {
    if (on_event_) on_event_(event, detail);
  }

  // Commands and I/O (single_node_client.cpp).
  void fail_fast(Handler handler);
  bool remember_script(const Script& script);
  void encode_script_load(const std::string& body);
  void send_internal(Kind kind);
  // Asks the server's TIME (redis_clock.hpp); one at a time.
  void send_time_probe();
  void on_time_reply(const Reply& reply);
  void send_user(CommandQueue::Entry entry);
  void schedule_flush();
  void start_write();
  void on_write(const ConnPtr& conn, const boost::system::error_code& ec);
  void do_read();
  void on_read(const ConnPtr& conn, const boost::system::error_code& ec, std::size_t n);
  void on_reply(Reply reply);
  void retry_with_eval(CommandQueue::Entry entry);
  void arm_sweep(Clock::time_point at);
  void on_sweep();
  void post_result(Handler handler, std::error_code ec, Reply reply = {});
  void fail_entries(Error error);
  void notify_waiters(std::error_code ec);

  boost::asio::any_io_executor ex_;
  const Options opts_;
  const std::string verify_name_;  // server_name or host
  std::string tls_setup_error_;    // non-empty: every attempt fails with kTls
  std::shared_ptr<boost::asio::ssl::context> tls_ctx_;

  std::atomic<State> state_{State::kDisconnected};
  ConnPtr conn_;
  CommandQueue awaiting_;
  std::size_t handshake_remaining_ = 0;
  std::vector<ConnectHandler> waiters_;
  CommandEncoder encoder_;
  std::unordered_map<std::string, std::shared_ptr<const std::string>> scripts_;  // sha1 -> body

  // Each timer's wait carries a sequence number; a stale wait returns at once.
  boost::asio::steady_timer connect_timer_;
  std::uint64_t connect_seq_ = 0;
  boost::asio::steady_timer backoff_timer_;
  std::uint64_t backoff_seq_ = 0;
  Backoff backoff_;
  std::uint64_t consecutive_failures_ = 0;
  boost::asio::steady_timer sweep_timer_;
  std::uint64_t sweep_seq_ = 0;
  bool sweep_armed_ = false;
  Clock::time_point sweep_at_{};

  // A TIME probe in flight, and when the next one is due while commands flow.
  bool time_probe_pending_ = false;
  Clock::time_point next_time_probe_{};

  std::error_code last_error_;
  std::string last_error_message_;
  Counters counters_;
  EventHandler on_event_;
};

}  // namespace sluice::redis
