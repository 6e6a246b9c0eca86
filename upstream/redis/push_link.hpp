// One connection to one Redis server for commands whose replies keep coming
// (a subscription) or that are answered once on a connection of their own
// (the Sentinel client's queries to a sentinel): connect (plain TCP, or TLS
// with the data nodes' TLS settings), AUTH with the given credentials when
// they are set, then the given commands in one write; every later reply goes
// to the reply handler. Connecting, AUTH and the first reply
// must all come within connect_timeout; after settle() the link has no
// deadline (a subscription that waits for events). The down handler is
// called once when the link fails and never after close(). Handlers run on
// the executor the link was made with, from the link's own completions (so
// they may close it); the link is kept alive by its pending operations.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "upstream/redis/codec.hpp"
#include "upstream/redis/connection.hpp"
#include "upstream/redis/options.hpp"

namespace sluice::redis {

// The payload of a pub/sub push ["message", channel, payload] on `channel`;
// nullopt for anything else (the subscribe confirmation, another channel).
std::optional<std::string_view> pubsub_payload(const Reply& reply, std::string_view channel);

class PushLink : public std::enable_shared_from_this<PushLink> {
 public:
  using ReplyHandler = std::function<void(const Reply&)>;
  using DownHandler = std::function<void(std::string reason)>;

  // AUTH with these (none when the password is empty).
  struct Credentials {
    std::string user;
    std::string password;
  };

  // `options` gives the TLS server name and connect_timeout (copied).
  PushLink(const boost::asio::any_io_executor& executor, const Options& options,
           Credentials credentials, std::shared_ptr<boost::asio::ssl::context> tls_context,
           Endpoint server);

  void start(std::vector<std::vector<std::string>> commands, ReplyHandler on_reply,
             DownHandler on_down);
  // The expected replies are in: no deadline from now on.
  void settle();
  // Stops everything; no handler is called afterwards. Idempotent.
  void close();

 private:
  void on_connect(const boost::system::error_code& ec);
  void send_commands();
  void do_read();
  void on_read(const boost::system::error_code& ec, std::size_t n);
  void on_reply(const Reply& reply);
  void fail(std::string reason);

  const std::string user_;
  const std::string password_;
  const std::chrono::milliseconds timeout_;
  const Endpoint server_;
  const std::string verify_name_;
  Connection conn_;
  boost::asio::steady_timer deadline_;
  std::vector<std::vector<std::string>> commands_;
  CommandEncoder encoder_;
  bool auth_pending_ = false;
  bool settled_ = false;
  bool closed_ = false;
  ReplyHandler on_reply_;
  DownHandler on_down_;
};

}  // namespace sluice::redis
