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

#include "common/deadline.hpp"
#include "support/io_loop.hpp"
#include "upstream/exchange/upstream_exchange.hpp"
#include "upstream/proxy_headers.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace sluice;
using namespace std::chrono_literals;

namespace {

// The client connection's side: a real deadline, a relay buffer, a client
// leg for requests without a body whose responses carry a Content-Length (or
// upgrade), and a record of how the exchange ended.
struct Host final : ExchangeHost, ClientLeg, std::enable_shared_from_this<Host> {
  Host(asio::io_context& io, UpstreamPools& pools, WorkerStream::socket_type socket)
      : client(std::move(socket)),
        deadline(io.get_executor()),
        relay(64 * 1024),
        exchange(*this, *this, client.get_executor(), pools) {}

  void set_deadline(Side side, std::chrono::steady_clock::duration timeout) override {
    deadline.expires_after(side, timeout, *this);
  }
  void on_deadline(Side side) {
    if (side == Side::kUpstream) exchange.on_upstream_deadline();
  }
  std::span<char> relay_buffer() override { return relay; }
  void serialize_request_head(std::string& out, std::string_view) override {
    out = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
  }
  bool draining() const override { return false; }
  bool client_closed() const override { return closed; }
  void count_upstream(const UpstreamConfig&, UpstreamOutcome outcome) override {
    outcomes.emplace_back(outcome_label(outcome));
  }
  void count_connection(const UpstreamConfig&) override { ++connections; }
  void count_retry() override {}
  void exchange_ended(const ExchangeResult& r) override {
    ++ends;
    result = r;
    done = r.end == ExchangeResult::End::kRelayed;
    aborted = r.end == ExchangeResult::End::kAborted;
    if (r.end == ExchangeResult::End::kUpstreamFailed) error = r.error;
  }
  void on_internal_error(std::string_view what) noexcept override { internal = what; }
  void tunnel_opened() override { ++tunnels; }
  void tunnel_relayed(TunnelDirection direction, std::size_t n) override {
    (direction == TunnelDirection::kClientToUpstream ? to_upstream : to_client) += n;
  }
  void tunnel_ended(bool graceful) override { ++ends, tunnel_end = graceful ? "graceful" : "cut"; }

  bool body_done() const override { return true; }
  bool body_at_hand() const override { return false; }
  bool expects_continue() const override { return false; }
  void send_continue() override { FAIL("no body to continue"); }
  void read_body(std::span<char>) override { FAIL("no body to read"); }
  void start_response(const ResponseStart& start) override {
    ResponseHeadOptions options;
    options.request_id = "rid";
    options.content_length = start.content_length;
    options.websocket = start.status == 101;
    keep = !start.has_body || start.content_length.has_value();
    serialize_response_head(head, start.status, start.reason, *start.fields, options);
  }
  void send_response(const char* data, std::size_t n, bool) override {
    out = std::exchange(head, {}) + std::string(data, n);
    asio::async_write(client, asio::buffer(out),
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->exchange.on_response_sent(ec);
                      });
  }
  bool keeps_client() const override { return keep; }
  UpgradeStreams upgrade_streams() override { return {&client, &buffer}; }
  std::string upgrade_head() override { return std::move(head); }

  ByteStream client;
  beast::flat_buffer buffer;
  Deadline<WorkerExecutor, Side> deadline;
  std::vector<char> relay;
  UpstreamExchange exchange;
  http::request_parser<http::buffer_body> parser;
  std::string head;  // the response head, until it goes
  std::string out;   // what is being written to the client
  bool keep = false;
  std::vector<std::string> outcomes;
  int connections = 0;
  int ends = 0;
  bool done = false;
  bool aborted = false;
  bool closed = false;  // the client connection was closed
  std::optional<UpstreamError> error;
  ExchangeResult result;  // the last one
  std::string internal;
  int tunnels = 0;
  std::size_t to_upstream = 0;
  std::size_t to_client = 0;
  std::string tunnel_end;  // how the tunnel ended: "graceful" or "cut"
};

struct Fixture {
  test::Loop loop;
  tcp::acceptor client_side{loop.io, {asio::ip::make_address("127.0.0.1"), 0}};
  tcp::socket browser{loop.io};
  UpstreamPools pools{loop.io.get_executor()};
  UpstreamConfig upstream;
  std::shared_ptr<Host> host;

  explicit Fixture(std::uint16_t upstream_port) {
    upstream.name = "u";
    upstream.servers.push_back({"127.0.0.1", upstream_port});
    upstream.connect_timeout = 1000ms;
    upstream.response_timeout = 5000ms;  // the test thread plays the server meanwhile
    browser.connect(client_side.local_endpoint());
    WorkerStream::socket_type accepted(loop.io.get_executor());
    client_side.accept(accepted);
    host = std::make_shared<Host>(loop.io, pools, std::move(accepted));
    asio::write(browser, asio::buffer(std::string{"GET /x HTTP/1.1\r\nHost: a\r\n\r\n"}));
    http::read_header(host->client.socket(), host->buffer, host->parser);
  }

  // `websocket`: the request is a WebSocket handshake, tunnelled after a 101
  // until idle for `idle`.
  void start(bool websocket = false, std::chrono::milliseconds idle = 5000ms) {
    ExchangeRequest request;
    request.upstream = &upstream;
    request.method = http::verb::get;
    request.send_timeout = 1000ms;
    request.body_empty = true;
    request.websocket = websocket;
    request.tunnel_idle_timeout = idle;
    host->exchange.start(request, std::shared_ptr<UpstreamExchange>(host, &host->exchange));
  }
};

std::uint16_t closed_port() {
  asio::io_context io;
  tcp::acceptor a{io, {asio::ip::make_address("127.0.0.1"), 0}};
  return a.local_endpoint().port();  // closed again when `a` goes
}

// The exchange ended once, as `error` (answered with `status`), counted as `outcome`.
void check_failed(Fixture& f, UpstreamError error, unsigned status, const std::string& outcome) {
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->ends == 1);
  REQUIRE(f.host->error);
  CHECK(*f.host->error == error);
  CHECK(status_for(*f.host->error) == status);
  CHECK(f.host->outcomes == std::vector<std::string>{outcome});
  CHECK(f.host->internal.empty());
}

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
  CHECK(f.host->outcomes == std::vector<std::string>{"ok"});
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
  CHECK(f.host->outcomes.empty());
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
  CHECK(f.host->outcomes == std::vector<std::string>{"ok"});
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
  CHECK(f.host->outcomes.empty());
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
