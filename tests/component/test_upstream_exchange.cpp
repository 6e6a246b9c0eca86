// The upstream exchange over real loopback sockets, with a hand-written host:
// a relayed response, a refused connect (502) and a response timeout (504),
// each ending with exactly one call to the host.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>

#include "gateway/common/deadline.hpp"
#include "support/io_loop.hpp"
#include "upstream/upstream_exchange.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace sluice;
using namespace std::chrono_literals;

namespace {

// The client connection's side: a real deadline, a relay buffer, and a record
// of how the exchange ended.
struct Host final : ExchangeHost, std::enable_shared_from_this<Host> {
  Host(asio::io_context& io, UpstreamPools& pools, WorkerStream::socket_type socket)
      : client(std::move(socket)),
        deadline(io.get_executor()),
        relay(64 * 1024),
        exchange(*this, client, buffer, pools) {}

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
  bool keep_client(bool ends_with_close) override { return !ends_with_close; }
  bool draining() const override { return false; }
  bool client_closed() const override { return false; }
  void count_upstream(const UpstreamConfig&, std::string_view outcome) override {
    outcomes.emplace_back(outcome);
  }
  void count_connection(const UpstreamConfig&) override { ++connections; }
  void count_retry() override {}
  void exchange_done() override { ++ends, done = true; }
  void upstream_failed(UpstreamError e) override { ++ends, error = e; }
  void request_body_failed(beast::error_code) override { ++ends; }
  void exchange_aborted() override { ++ends; }
  void on_internal_error(std::string_view what) noexcept override { internal = what; }

  ClientStream client;
  beast::flat_buffer buffer;
  Deadline<WorkerExecutor, Side> deadline;
  std::vector<char> relay;
  UpstreamExchange exchange;
  ClientParser parser;
  std::vector<std::string> outcomes;
  int connections = 0;
  int ends = 0;
  bool done = false;
  std::optional<UpstreamError> error;
  std::string internal;
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
    upstream.response_timeout = 100ms;
    browser.connect(client_side.local_endpoint());
    WorkerStream::socket_type accepted(loop.io.get_executor());
    client_side.accept(accepted);
    host = std::make_shared<Host>(loop.io, pools, std::move(accepted));
    asio::write(browser, asio::buffer(std::string{"GET /x HTTP/1.1\r\nHost: a\r\n\r\n"}));
    http::read_header(host->client.socket(), host->buffer, host->parser);
  }

  void start() {
    ExchangeRequest request;
    request.upstream = &upstream;
    request.request_id = "rid";
    request.send_timeout = 1000ms;
    request.body_timeout = 1000ms;
    request.body_empty = true;
    host->exchange.start(request, host->parser,
                         std::shared_ptr<UpstreamExchange>(host, &host->exchange));
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
  CHECK(f.host->exchange.client_keep_alive());
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
  f.start();
  check_failed(f, UpstreamError::kResponseTimedOut, 504, "timeout");
}
