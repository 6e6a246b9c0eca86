// One server's active health checker over real loopback sockets: the request
// it sends, and a good status, an unexpected status, a refused connect, a
// server that never answers, and a line that is not a status line, each
// reported once per check. After stop() nothing more is reported.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include "support/io_loop.hpp"
#include "upstream/health/health_checker.hpp"

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace sluice;
using namespace std::chrono_literals;

namespace {

// Accepts connections and answers each request head with `reply` (nothing
// at all when it is empty), keeping the connection open.
struct CheckedServer {
  explicit CheckedServer(asio::io_context& io)
      : acceptor(io, {asio::ip::make_address("127.0.0.1"), 0}) {
    accept();
  }
  void accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) return;
      auto conn = std::make_shared<Conn>(std::move(socket));
      conns.push_back(conn);
      asio::async_read_until(conn->socket, asio::dynamic_buffer(conn->head), "\r\n\r\n",
                             [this, conn](boost::system::error_code ec, std::size_t) {
                               if (ec) return;
                               requests.push_back(conn->head);
                               if (!reply.empty()) {
                                 asio::async_write(conn->socket, asio::buffer(reply),
                                                   [](boost::system::error_code, std::size_t) {});
                               }
                             });
      accept();
    });
  }
  HostPort address() const { return {"127.0.0.1", acceptor.local_endpoint().port()}; }

  struct Conn {
    explicit Conn(tcp::socket s) : socket(std::move(s)) {}
    tcp::socket socket;
    std::string head;
  };
  tcp::acceptor acceptor;
  std::vector<std::shared_ptr<Conn>> conns;
  std::vector<std::string> requests;
  std::string reply = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
};

HealthCheckConfig check_config() {
  HealthCheckConfig check;
  check.path = "/healthz";
  check.interval = 10s;  // one check per test: the first, at start()
  check.timeout = 2000ms;  // a slow machine still answers in time
  return check;
}

// The first result of a checker of `server`.
HealthCheckResult first_result(test::Loop& loop, const HostPort& server,
                               const HealthCheckConfig& check = check_config()) {
  std::vector<HealthCheckResult> results;
  HealthChecker checker(loop.io, server, check, nullptr,
                        [&](const HealthCheckResult& r) { results.push_back(r); });
  checker.start();
  CHECK(results.empty());  // never from inside start()
  REQUIRE(loop.run_until([&] { return !results.empty(); }));
  checker.stop();
  return results.front();
}

}  // namespace

TEST_CASE("health checker: the request and a good status", "[health_checker]") {
  test::Loop loop;
  CheckedServer server(loop.io);
  const auto result = first_result(loop, server.address());
  CHECK(result.ok);
  CHECK(result.detail == "status 200");
  REQUIRE(server.requests.size() == 1);
  const std::string port = std::to_string(server.address().port);
  CHECK(server.requests[0] ==
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:" + port +
            "\r\nUser-Agent: sluice-health-check\r\nConnection: close\r\n\r\n");
}

TEST_CASE("health checker: failures", "[health_checker]") {
  test::Loop loop;
  CheckedServer server(loop.io);

  SECTION("a status that is not expected") {
    server.reply = "HTTP/1.1 503 Service Unavailable\r\n\r\n";
    const auto result = first_result(loop, server.address());
    CHECK_FALSE(result.ok);
    CHECK(result.detail == "status 503");
  }
  SECTION("an expected status other than 200") {
    server.reply = "HTTP/1.1 204 No Content\r\n\r\n";
    auto check = check_config();
    check.expected_status = {200, 204};
    CHECK(first_result(loop, server.address(), check).ok);
  }
  SECTION("a line that is not a status line") {
    server.reply = "SSH-2.0-OpenSSH_9.2\r\n";
    const auto result = first_result(loop, server.address());
    CHECK_FALSE(result.ok);
    CHECK(result.detail == "not an HTTP/1.x status line");
  }
  SECTION("no answer within the timeout") {
    server.reply.clear();
    auto check = check_config();
    check.timeout = 200ms;
    const auto result = first_result(loop, server.address(), check);
    CHECK_FALSE(result.ok);
    CHECK(result.detail == "timed out");
  }
  SECTION("a refused connect") {
    const auto address = server.address();
    server.acceptor.close();
    const auto result = first_result(loop, address);
    CHECK_FALSE(result.ok);
    CHECK(result.detail.starts_with("connect: "));
  }
}

TEST_CASE("health checker: checks repeat every interval, and stop() ends them",
          "[health_checker]") {
  test::Loop loop;
  CheckedServer server(loop.io);
  auto check = check_config();
  check.interval = 50ms;
  check.timeout = 40ms;
  int reports = 0;
  HealthChecker checker(loop.io, server.address(), check, nullptr,
                        [&](const HealthCheckResult&) { ++reports; });
  checker.start();
  REQUIRE(loop.run_until([&] { return reports >= 3; }));
  checker.stop();
  const int at_stop = reports;
  loop.run_until([] { return false; }, 150ms);  // three intervals without a report
  CHECK(reports == at_stop);
}
