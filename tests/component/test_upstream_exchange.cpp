// The upstream exchange over real loopback sockets, with a hand-written host:
// a relayed response, a refused connect (502) and a response timeout (504),
// each ending with exactly one call to the host.
#include <catch2/catch.hpp>

#include <memory>
#include <thread>
#include <string>
#include <vector>

#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>

#include "support/exchange_fixture.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace sluice;
using namespace std::chrono_literals;

namespace {

// The client connection's side and the fixture that starts an exchange with
// it (support/exchange_fixture.hpp).
using Host = test::FakeExchangeHost;
using Fixture = test::ExchangeFixture;
using test::check_failed;
using test::closed_port;

}  // namespace

TEST_CASE("exchange: the response is relayed and the exchange done", "[exchange]") {
  asio::io_context upstream_io;
  tcp::acceptor upstream_side{upstream_io, {asio::ip::make_address("127.0.0.1"), 0}};
  Fixture f(upstream_side.local_endpoint().port());
  f.start();
  REQUIRE(f.loop.run_until([&] { return f.host->connections == 1; }));
  tcp::socket server{upstream_io};
  upstream_side.accept(server);
  std::string request;
  asio::read_until(server, asio::dynamic_buffer(request), "\r\n\r\n");
  CHECK(request == "GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
  asio::write(server, asio::buffer(std::string{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"}));
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->done);
  CHECK(f.host->ends == 1);
  CHECK(f.host->outcomes() == std::vector<std::string>{"ok"});
  // The host heard of the answer before the client leg got any of it, with
  // the attempt noted (it counts it then, before the client can read).
  CHECK(f.host->started == 1);
  CHECK(f.host->started_before_head);
  CHECK(f.host->outcomes_at_start == std::vector<std::string>{"ok"});
  CHECK(f.host->exchange.upstream_status() == 200);
  CHECK(f.host->result.client_keep_alive);
  CHECK(f.host->result.status == 200);
  CHECK_FALSE(f.host->result.upstream_reused);  // a new connection
  std::string response;
  asio::read_until(f.browser, asio::dynamic_buffer(response), "hi");
  CHECK(response.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(response.find("X-Request-Id: rid\r\n") != std::string::npos);
  CHECK(response.ends_with("\r\n\r\nhi"));
}

TEST_CASE("exchange: a refused connect ends as a 502", "[exchange]") {
  Fixture f(closed_port());
  f.start();
  check_failed(f, UpstreamError::kConnectFailed, 502, "connect_error");
}

TEST_CASE("exchange: no response within response_timeout ends as a 504", "[exchange]") {
  asio::io_context upstream_io;
  tcp::acceptor upstream_side{upstream_io, {asio::ip::make_address("127.0.0.1"), 0}};
  Fixture f(upstream_side.local_endpoint().port());
  f.upstream.response_timeout = 100ms;
  f.start();
  check_failed(f, UpstreamError::kResponseTimedOut, 504, "timeout");
}

namespace {

// An upstream server for one exchange: accepts the exchange's connection and
// reads its request head.
struct Upstream {
  asio::io_context io;
  tcp::acceptor acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}};
  tcp::socket server{io};

  std::uint16_t port() const { return acceptor.local_endpoint().port(); }
  void accept(Fixture& f) {
    REQUIRE(f.loop.run_until([&] { return f.host->connections == 1; }));
    acceptor.accept(server);
    std::string request;
    asio::read_until(server, asio::dynamic_buffer(request), "\r\n\r\n");
  }
  void send(const std::string& bytes) { asio::write(server, asio::buffer(bytes)); }
  // The bytes the gateway relayed, once `n` of them are there (the loop runs meanwhile).
  std::string receive(Fixture& f, std::size_t n) {
    REQUIRE(f.loop.run_until([&] { return f.host->to_upstream >= n; }));
    std::string got(n, '\0');
    asio::read(server, asio::buffer(got));
    return got;
  }
};

const std::string kSwitching =
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Accept: abc\r\n\r\n";

// What the browser has received, up to and including `until`.
std::string browser_read(Fixture& f, std::size_t relayed, const std::string& until) {
  REQUIRE(f.loop.run_until([&] {
    return f.host->to_client >= relayed && f.browser.available() >= until.size();
  }));
  std::string got;
  asio::read_until(f.browser, asio::dynamic_buffer(got), until);
  return got;
}

}  // namespace

TEST_CASE("exchange: an upstream connection dropped while its read is pending goes once the "
          "read has ended",
          "[exchange]") {
  Upstream u;
  Fixture f(u.port());
  f.upstream.max_connections = 1;
  f.start();
  u.accept(f);  // the request went
  f.loop.io.poll();  // its write completes: the exchange reads the response head
  f.host->exchange.drop_upstream();
  f.host->exchange.reset();  // the host moves on at once
  // The read still holds the connection's buffer and the response parser:
  // the connection is closed, still counted against max_connections, and
  // goes (with that parser) when the read has ended.
  CHECK(f.pools.open(f.upstream, 0) == nullptr);
  REQUIRE(f.loop.run_until([&] { return f.pools.open(f.upstream, 0) != nullptr; }));
  char byte;
  beast::error_code ec;
  u.server.read_some(asio::buffer(&byte, 1), ec);
  CHECK(ec == asio::error::eof);
  // The host hears nothing of the ended read: whoever dropped it goes on.
  CHECK(f.host->ends == 0);
  CHECK(f.host->outcomes().empty());
  CHECK(f.host->internal.empty());
}

TEST_CASE("exchange: a server given by name is resolved and connected to", "[exchange]") {
  Upstream u;
  Fixture f(u.port());
  f.upstream.servers[0].host = "localhost";
  f.start();
  u.accept(f);
  u.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->done);
  CHECK(f.host->outcomes() == std::vector<std::string>{"ok"});
  CHECK(f.host->exchange.upstream_server() == "localhost:" + std::to_string(u.port()));
}

TEST_CASE("exchange: a client connection closed while the name is resolved sends nothing upstream",
          "[exchange]") {
  Upstream u;
  Fixture f(u.port());
  f.upstream.servers[0].host = "localhost";
  f.start();  // the name is being resolved
  f.host->closed = true;
  f.host->exchange.close_upstream_socket();
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->aborted);
  CHECK(f.host->ends == 1);
  CHECK(f.host->connections == 0);
  CHECK(f.host->outcomes().empty());
  // No connection ever came.
  u.acceptor.non_blocking(true);
  beast::error_code ec;
  u.acceptor.accept(u.server, ec);
  CHECK(ec == asio::error::would_block);
}

TEST_CASE("exchange: a 101 to a request that asked for no upgrade ends as a 502", "[exchange]") {
  Upstream u;
  Fixture f(u.port());
  f.start();
  u.accept(f);
  u.send(kSwitching);
  check_failed(f, UpstreamError::kUnexpectedUpgrade, 502, "protocol_error");
  CHECK(f.host->tunnels == 0);
}

TEST_CASE("exchange: a 101 upgrading a WebSocket handshake to another protocol ends as a 502",
          "[exchange]") {
  Upstream u;
  Fixture f(u.port());
  f.start(true);
  u.accept(f);
  u.send("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n");
  check_failed(f, UpstreamError::kUnexpectedUpgrade, 502, "protocol_error");
}

TEST_CASE("tunnel: after the 101 bytes go both ways; the upstream's close ends it gracefully",
          "[exchange][tunnel]") {
  Upstream u;
  Fixture f(u.port());
  f.start(true);
  u.accept(f);
  u.send(kSwitching + "first");  // a frame in the same packet as the head
  const auto head = browser_read(f, 5, "first");
  CHECK(f.host->tunnels == 1);
  CHECK(f.host->exchange.upstream_status() == 101);
  CHECK(head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"));
  CHECK(head.find("Connection: Upgrade\r\nUpgrade: websocket\r\n\r\nfirst") != std::string::npos);
  CHECK(head.find("Sec-WebSocket-Accept: abc\r\n") != std::string::npos);
  CHECK(head.find("X-Request-Id: rid\r\n") != std::string::npos);
  CHECK(head.find("Content-Length") == std::string::npos);
  CHECK(head.find("Transfer-Encoding") == std::string::npos);

  // Larger than a first buffer: the buffer grows, nothing is lost or reordered.
  std::string big(200 * 1024, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i % 251);
  asio::write(f.browser, asio::buffer(big));
  CHECK(u.receive(f, big.size()) == big);
  u.send("second");
  CHECK(browser_read(f, 11, "second") == "second");
  CHECK(f.host->ends == 0);

  u.server.close();
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->tunnel_end == "graceful");
  CHECK(f.host->ends == 1);
  CHECK(f.host->internal.empty());
}

TEST_CASE("tunnel: the client's end of stream half-closes the upstream, whose answer still flows",
          "[exchange][tunnel]") {
  Upstream u;
  Fixture f(u.port());
  f.start(true);
  u.accept(f);
  u.send(kSwitching);
  browser_read(f, 0, "\r\n\r\n");
  f.browser.shutdown(tcp::socket::shutdown_send);
  // The upstream reads the end of the stream.
  u.server.non_blocking(true);
  beast::error_code ec;
  REQUIRE(f.loop.run_until([&] {
    char c;
    u.server.read_some(asio::buffer(&c, 1), ec);
    return ec != asio::error::would_block;
  }));
  CHECK(ec == asio::error::eof);
  u.server.non_blocking(false);
  u.send("last words");
  CHECK(browser_read(f, 10, "words") == "last words");
  CHECK(f.host->ends == 0);
  u.server.close();
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->tunnel_end == "graceful");
}

TEST_CASE("tunnel: no byte either way for the idle timeout cuts both sides", "[exchange][tunnel]") {
  Upstream u;
  Fixture f(u.port());
  f.start(true, 100ms);
  u.accept(f);
  u.send(kSwitching);
  browser_read(f, 0, "\r\n\r\n");
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->tunnel_end == "cut");
  CHECK(f.host->ends == 1);
  // The upstream connection was closed.
  char c;
  beast::error_code ec;
  u.server.read_some(asio::buffer(&c, 1), ec);
  CHECK((ec == asio::error::eof || ec == asio::error::connection_reset));
}

TEST_CASE("tunnel: the host stopping it closes the upstream and reports once", "[exchange][tunnel]") {
  Upstream u;
  Fixture f(u.port());
  f.start(true);
  u.accept(f);
  u.send(kSwitching);
  browser_read(f, 0, "\r\n\r\n");
  f.host->exchange.close_upstream_socket();
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->tunnel_end == "cut");
  f.loop.run_until([] { return false; }, 50ms);
  CHECK(f.host->ends == 1);
}

TEST_CASE("tunnel: a client that takes nothing for send_timeout is cut, however busy the upstream",
          "[exchange][tunnel]") {
  Upstream u;
  Fixture f(u.port());
  f.start(true, 60000ms);  // never idle here: the send timeout (1 s) must end it
  u.accept(f);
  u.send(kSwitching);
  browser_read(f, 0, "\r\n\r\n");
  // The upstream keeps sending; the browser reads nothing more.
  std::thread flood([&] {
    const std::string piece(64 * 1024, 'x');
    beast::error_code ec;
    for (int i = 0; i < 1024 && !ec; ++i) asio::write(u.server, asio::buffer(piece), ec);
  });
  const bool ended = f.loop.run_until([&] { return f.host->ends > 0; }, 10000ms);
  beast::error_code ignored;
  u.server.shutdown(tcp::socket::shutdown_both, ignored);  // ends the flood whatever happened
  flood.join();
  REQUIRE(ended);
  CHECK(f.host->tunnel_end == "cut");
  CHECK(f.host->to_client < 64 * 1024 * 1024);
}
