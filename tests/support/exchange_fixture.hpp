// The upstream exchange's test host: a hand-written ExchangeHost and
// ClientLeg over a real client connection (a "browser" socket on loopback),
// and the fixture that starts an exchange with it. Shared by the exchange's
// tests with each upstream protocol.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>

#include "common/deadline.hpp"
#include "support/io_loop.hpp"
#include "upstream/exchange/upstream_exchange.hpp"
#include "upstream/proxy_headers.hpp"
#include "upstream/request_head.hpp"

namespace sluice::test {

namespace exchange_detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
}  // namespace exchange_detail
using namespace exchange_detail;
using namespace std::chrono_literals;

// The client connection's side: a real deadline, a relay buffer, a client
// leg for requests without a body whose responses carry a Content-Length (or
// upgrade), and a record of how the exchange ended.
struct FakeExchangeHost final : ExchangeHost,
                                ClientLeg,
                                std::enable_shared_from_this<FakeExchangeHost> {
  FakeExchangeHost(asio::io_context& io, UpstreamPools& pools, WorkerStream::socket_type socket)
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
  bool draining() const override { return false; }
  bool client_closed() const override { return closed; }
  // The exchange's attempts so far, by outcome label, and its retries.
  std::vector<std::string> outcomes() const {
    std::vector<std::string> labels;
    exchange.facts().each_attempt([&](UpstreamOutcome outcome, std::uint16_t n) {
      labels.insert(labels.end(), n, std::string(outcome_label(outcome)));
    });
    return labels;
  }
  int retries() const { return exchange.facts().retries; }
  // What the exchange had noted when it said a server answered, and whether
  // any of the response had reached the client leg by then.
  void response_started() override {
    ++started;
    outcomes_at_start = outcomes();
    started_before_head = head.empty() && out.empty();
  }
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
  http::request_parser<http::buffer_body, sluice::FieldAllocator<char>> parser;
  std::string head;  // the response head, until it goes
  std::string out;   // what is being written to the client
  bool keep = false;
  int connections = 0;  // new connections, as the pools count them
  int ends = 0;
  int started = 0;  // response_started() calls
  std::vector<std::string> outcomes_at_start;
  bool started_before_head = false;
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

struct ExchangeFixture {
  Loop loop;
  tcp::acceptor client_side{loop.io, {asio::ip::make_address("127.0.0.1"), 0}};
  tcp::socket browser{loop.io};
  UpstreamPools pools{loop.io.get_executor()};
  UpstreamConfig upstream;
  UpstreamHead head;  // GET /x, Host: a
  std::shared_ptr<FakeExchangeHost> host;

  explicit ExchangeFixture(std::uint16_t upstream_port) {
    upstream.name = "u";
    upstream.servers.push_back({"127.0.0.1", upstream_port});
    upstream.connect_timeout = 1000ms;
    upstream.response_timeout = 5000ms;  // the test thread plays the server meanwhile
    browser.connect(client_side.local_endpoint());
    WorkerStream::socket_type accepted(loop.io.get_executor());
    client_side.accept(accepted);
    host = std::make_shared<FakeExchangeHost>(loop.io, pools, std::move(accepted));
    pools.on_connection([this](const UpstreamConfig&) { ++host->connections; });
    asio::write(browser, asio::buffer(std::string{"GET /x HTTP/1.1\r\nHost: a\r\n\r\n"}));
    http::read_header(host->client.socket(), host->buffer, host->parser);
  }

  // `websocket`: the request is a WebSocket handshake, tunnelled after a 101
  // until idle for `idle`.
  void start(bool websocket = false, std::chrono::milliseconds idle = 5000ms) {
    head.method = "GET";
    head.target = "/x";
    head.fields = {{"Host", "a"}};
    head.has_host = true;
    ExchangeRequest request;
    request.upstream = &upstream;
    request.head = &head;
    request.relay = host->relay;
    request.method = http::verb::get;
    request.send_timeout = 1000ms;
    request.body_empty = true;
    request.websocket = websocket;
    request.tunnel_idle_timeout = idle;
    host->exchange.start(request, std::shared_ptr<UpstreamExchange>(host, &host->exchange));
  }
};

inline std::uint16_t closed_port() {
  asio::io_context io;
  tcp::acceptor a{io, {asio::ip::make_address("127.0.0.1"), 0}};
  return a.local_endpoint().port();  // closed again when `a` goes
}

// The exchange ended once, as `error` (answered with `status`), counted as `outcome`.
inline void check_failed(ExchangeFixture& f, UpstreamError error, unsigned status,
                         const std::string& outcome) {
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->ends == 1);
  REQUIRE(f.host->error);
  CHECK(*f.host->error == error);
  CHECK(status_for(*f.host->error) == status);
  CHECK(f.host->outcomes() == std::vector<std::string>{outcome});
  CHECK(f.host->internal.empty());
}

}  // namespace sluice::test
