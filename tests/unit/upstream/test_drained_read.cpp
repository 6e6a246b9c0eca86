// upstream/drained_read.hpp: after a short read, the next read waits for
// epoll before it tries the socket. What must hold over a real loopback
// connection: no byte is missed or reordered, whatever the order of the
// peer's writes, the reads and the event loop's polls; a read that filled
// its buffer leaves the rest to the next read at once; the end of the
// stream (also when it comes with the last bytes), a cancel and a close end
// a read as Asio's own would.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "upstream/drained_read.hpp"
#include "upstream/stream_types.hpp"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

struct Connection {
  asio::io_context io;
  sluice::WorkerStream::socket_type reader{io.get_executor()};
  tcp::socket writer{io};  // written to with blocking writes
  sluice::DrainedReader drained;

  Connection() {
    tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    writer.connect(acceptor.local_endpoint());
    acceptor.accept(reader);
  }

  void write(const std::string& bytes) { asio::write(writer, asio::buffer(bytes)); }

  // A read in flight and what it completed with.
  struct Read {
    std::string buffer;
    bool done = false;
    error_code ec;
  };

  void start(Read& read, std::size_t size) {
    read.buffer.assign(size, '\0');
    drained.async_read(reader, asio::buffer(read.buffer), [&read](error_code ec, std::size_t n) {
      read.ec = ec;
      read.buffer.resize(n);
      read.done = true;
    });
  }

  // Runs what is ready now, without waiting.
  void poll() {
    io.restart();
    io.poll();
  }

  // What a read that waits for nothing but the end ended with.
  error_code end_of_reads() {
    Read read;
    start(read, 64);
    finish(read);
    REQUIRE(read.done);
    CHECK(read.buffer.empty());
    return read.ec;
  }

  // Runs the event loop until `read` completes (at most 5 s: a missed
  // wake-up fails the test rather than hanging it).
  void finish(Read& read) {
    io.restart();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!read.done && std::chrono::steady_clock::now() < until) {
      io.run_one_for(std::chrono::milliseconds(100));
    }
  }

  std::string read_some(std::size_t size) {
    Read read;
    start(read, size);
    finish(read);
    REQUIRE(read.done);
    REQUIRE_FALSE(read.ec);
    return read.buffer;
  }
};

}  // namespace

TEST_CASE("drained read: bytes that come after a short read are read, in every order",
          "[drained_read]") {
  Connection c;
  for (int i = 0; i < 300; ++i) {
    const std::string message = "message " + std::to_string(i);
    Connection::Read read;
    switch (i % 3) {
      case 0:  // written before the read starts (Asio heard of it or not)
        c.write(message);
        c.start(read, 64);
        break;
      case 1:  // the read waits first
        c.start(read, 64);
        c.poll();
        CHECK_FALSE(read.done);
        c.write(message);
        break;
      default:  // the event loop sees the bytes while no read waits
        c.write(message);
        c.poll();
        c.start(read, 64);
        break;
    }
    c.finish(read);
    REQUIRE(read.done);
    REQUIRE_FALSE(read.ec);
    CHECK(read.buffer == message);  // all of it: each was shorter than the buffer
  }
}

TEST_CASE("drained read: a read that fills its buffer leaves the rest to the next at once",
          "[drained_read]") {
  Connection c;
  c.write("first");
  CHECK(c.read_some(64) == "first");
  int inq = 0;
  socklen_t size = sizeof inq;
  REQUIRE(::getsockopt(c.reader.native_handle(), SOL_TCP, TCP_INQ, &inq, &size) == 0);
  CHECK(inq == 1);  // the kernel says what is left with each read
  std::string sent;
  for (int i = 0; i < 100; ++i) sent += "0123456789";
  c.write(sent);
  std::string got;
  while (got.size() < sent.size()) got += c.read_some(100);  // never a short read
  CHECK(got == sent);
  // Nothing more now: the next read waits, then takes what comes.
  Connection::Read read;
  c.start(read, 100);
  c.poll();
  CHECK_FALSE(read.done);
  c.write("end");
  c.finish(read);
  CHECK(read.buffer == "end");
}

TEST_CASE("drained read: the end of the stream, a cancel and a close end a read",
          "[drained_read]") {
  SECTION("the peer closes") {
    Connection c;
    c.write("last");
    CHECK(c.read_some(64) == "last");
    c.writer.close();
    CHECK(c.end_of_reads() == asio::error::eof);
  }
  SECTION("the last bytes and the close come together: the end is read at once") {
    Connection c;
    c.write("last");
    c.writer.shutdown(tcp::socket::shutdown_send);
    c.poll();  // the event loop sees both at once
    CHECK(c.read_some(64) == "last");
    CHECK(c.end_of_reads() == asio::error::eof);
  }
  SECTION("cancelled while it waits") {
    Connection c;
    Connection::Read read;
    c.start(read, 64);
    c.poll();
    REQUIRE_FALSE(read.done);
    c.reader.cancel();
    c.finish(read);
    REQUIRE(read.done);
    CHECK(read.ec == asio::error::operation_aborted);
  }
  SECTION("closed while it waits") {
    Connection c;
    Connection::Read read;
    c.start(read, 64);
    c.reader.close();
    c.finish(read);
    REQUIRE(read.done);
    CHECK(read.ec == asio::error::operation_aborted);
  }
}
