// One connection attempt of a Redis client: its stream, resolver, reply reader
// and write buffers. Replaced wholesale on reconnect, so a handler holding a
// torn-down Connection can tell it is stale. Used on the client's executor only.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <string>
#include <vector>

#include "upstream/redis/reply.hpp"
#include "upstream/redis/transport.hpp"

namespace sluice::redis {

struct Connection {
  static constexpr std::size_t kReadChunk = 16 * 1024;

  Connection(const boost::asio::any_io_executor& executor,
             std::shared_ptr<boost::asio::ssl::context> tls_context)
      : stream(executor, std::move(tls_context)), resolver(executor), read_buf(kReadChunk) {}

  // Cancels everything in flight; handlers then see they are stale.
  void close() {
    resolver.cancel();
    stream.close();
  }

  Stream stream;
  boost::asio::ip::tcp::resolver resolver;
  ReplyReader reader;
  std::vector<char> read_buf;
  std::string out_pending;  // encoded commands for the next write
  std::size_t pending_commands = 0;
  std::string out_writing;  // bytes of the write in flight
  bool writing = false;
  bool flush_posted = false;
};

}  // namespace sluice::redis
