// The exchange's HTTP/2 leg alone, and the upstream stream's one state,
// against an h2c server played by nghttp2 on a thread of its own: a relayed
// response, a refused stream sent again on another, a connection that breaks
// under the stream (502), a refused connect (502); and each H2Stream end the
// connection reports (kClosed with the response whole, kConnectFailed,
// kBroken), with a stream opened before the server's SETTINGS kQueued until
// they come.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nghttp2/nghttp2.h>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include "support/exchange_fixture.hpp"
#include "support/io_loop.hpp"
#include "upstream/h2/h2_connection.hpp"

namespace h2_leg_test {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace sluice;
using namespace std::chrono_literals;

// An h2c server on a thread of its own. Each request is answered 200 with
// `body`, except that the first `refuse` are refused (RST_STREAM
// REFUSED_STREAM) and, with `hang_up`, the connection is closed instead.
class H2Server {
 public:
  struct Options {
    int refuse = 0;
    bool hang_up = false;
    std::string body = "hi";
  };

  explicit H2Server(Options options) : options_(std::move(options)) {
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~H2Server() {
    io_.stop();
    thread_.join();
  }
  std::uint16_t port() const { return port_; }
  int requests() const { return requests_; }

 private:
  struct Conn {
    H2Server& server;
    tcp::socket socket;
    nghttp2_session* session = nullptr;
    std::array<std::uint8_t, 16 * 1024> in{};
    Conn(H2Server& s, tcp::socket sock) : server(s), socket(std::move(sock)) {}
    ~Conn() { nghttp2_session_del(session); }

    void flush() {
      std::string out;
      const std::uint8_t* data = nullptr;
      for (auto n = nghttp2_session_mem_send(session, &data); n > 0;
           n = nghttp2_session_mem_send(session, &data)) {
        out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
      }
      boost::system::error_code ignored;
      if (socket.is_open()) asio::write(socket, asio::buffer(out), ignored);
    }
    void read() {
      socket.async_read_some(asio::buffer(in), [this](boost::system::error_code ec, std::size_t n) {
        if (ec || !socket.is_open()) return;
        if (nghttp2_session_mem_recv(session, in.data(), n) < 0) return;
        flush();
        read();
      });
    }
    void answer(std::int32_t id) {
      const int n = ++server.requests_;
      if (n <= server.options_.refuse) {
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, NGHTTP2_REFUSED_STREAM);
        return;
      }
      if (server.options_.hang_up) {
        boost::system::error_code ignored;
        socket.close(ignored);
        return;
      }
      const std::string length = std::to_string(server.options_.body.size());
      const nghttp2_nv head[] = {nv(":status", "200"), nv("content-length", length)};
      nghttp2_data_provider provider{};
      provider.read_callback = [](nghttp2_session*, std::int32_t, std::uint8_t* buf,
                                  std::size_t length, std::uint32_t* flags, nghttp2_data_source*,
                                  void* user_data) -> ssize_t {
        const std::string& body = static_cast<Conn*>(user_data)->server.options_.body;
        const std::size_t n = std::min(length, body.size());  // small bodies: in one frame
        std::memcpy(buf, body.data(), n);
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return static_cast<ssize_t>(n);
      };
      nghttp2_submit_response(session, id, head, std::size(head), &provider);
    }
    static nghttp2_nv nv(std::string_view name, std::string_view value) {
      return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
              reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
              value.size(), NGHTTP2_NV_FLAG_NONE};
    }
  };

  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) return;
      auto& c = *conns_.emplace_back(std::make_unique<Conn>(*this, std::move(socket)));
      nghttp2_session_callbacks* callbacks = nullptr;
      nghttp2_session_callbacks_new(&callbacks);
      nghttp2_session_callbacks_set_on_frame_recv_callback(
          callbacks, [](nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
            const bool request_end =
                (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
                (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
            if (request_end) static_cast<Conn*>(user_data)->answer(frame->hd.stream_id);
            return 0;
          });
      nghttp2_session_server_new(&c.session, callbacks, &c);
      nghttp2_session_callbacks_del(callbacks);
      nghttp2_submit_settings(c.session, NGHTTP2_FLAG_NONE, nullptr, 0);
      c.flush();
      c.read();
      accept();
    });
  }

  Options options_;
  asio::io_context io_;
  tcp::acceptor acceptor_{io_, {asio::ip::make_address("127.0.0.1"), 0}};
  std::vector<std::unique_ptr<Conn>> conns_;
  std::atomic<int> requests_{0};
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// The exchange with an h2c upstream at `port`.
struct H2Fixture : test::ExchangeFixture {
  explicit H2Fixture(std::uint16_t port) : ExchangeFixture(port) {
    upstream.protocol = UpstreamProtocol::kH2c;
  }
};

// An H2Connection of its own to `port`, and a GET stream on it.
struct Direct {
  test::Loop loop;
  std::shared_ptr<H2Connection> conn;
  int wakes = 0;

  explicit Direct(std::uint16_t port,
                  std::chrono::milliseconds idle_timeout = std::chrono::seconds(60)) {
    auto c = std::make_unique<UpstreamConnection>(loop.io.get_executor());
    c->address = {"127.0.0.1", port};
    c->server = c->address.to_string();
    H2Connection::Options options;
    options.upstream = "u";
    options.log_failures = false;
    options.idle_timeout = idle_timeout;
    conn = std::make_shared<H2Connection>(std::move(c), std::move(options));
    conn->connect();
  }
  ~Direct() { conn->close(); }
  std::shared_ptr<H2Stream> open() {
    const H2HeaderBlock head = {
        {":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/x"}};
    return conn->open_stream(head, false, [this] { ++wakes; });
  }
};

}  // namespace h2_leg_test

using namespace h2_leg_test;

TEST_CASE("h2 leg: the response is relayed and the exchange done", "[exchange][h2]") {
  H2Server server({});
  H2Fixture f(server.port());
  f.start();
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->done);
  CHECK(f.host->ends == 1);
  CHECK(f.host->outcomes() == std::vector<std::string>{"ok"});
  CHECK(f.host->connections == 1);
  CHECK(f.host->retries() == 0);
  CHECK(f.host->result.status == 200);
  CHECK(f.host->exchange.upstream_server() == "127.0.0.1:" + std::to_string(server.port()));
  CHECK(f.host->internal.empty());
  std::string response;
  asio::read_until(f.browser, asio::dynamic_buffer(response), "hi");
  CHECK(response.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(response.ends_with("\r\n\r\nhi"));
}

TEST_CASE("h2 leg: a refused stream goes again on another stream", "[exchange][h2]") {
  H2Server server({.refuse = 1});
  H2Fixture f(server.port());
  f.start();
  REQUIRE(f.loop.run_until([&] { return f.host->ends > 0; }));
  CHECK(f.host->done);
  CHECK(f.host->retries() == 1);
  CHECK(server.requests() == 2);
  CHECK(f.host->outcomes() == std::vector<std::string>{"ok"});
}

TEST_CASE("h2 leg: a connection that breaks under the stream ends as a 502", "[exchange][h2]") {
  H2Server server({.hang_up = true});
  H2Fixture f(server.port());
  f.start();
  test::check_failed(f, UpstreamError::kConnectionFailed, 502, "reset");
}

TEST_CASE("h2 leg: a refused connect ends as a 502", "[exchange][h2]") {
  H2Fixture f(test::closed_port());
  f.start();
  test::check_failed(f, UpstreamError::kConnectFailed, 502, "connect_error");
}

TEST_CASE("h2 stream: from queued to closed with its response whole, one state", "[exchange][h2]") {
  H2Server server({});
  Direct d(server.port());
  // Before the server's SETTINGS one stream is sent and the next waits.
  auto first = d.open();
  auto second = d.open();
  REQUIRE(first);
  REQUIRE(second);
  CHECK(first->state == H2Stream::State::kOpen);
  CHECK(second->state == H2Stream::State::kQueued);
  CHECK(first->response == H2Stream::Response::kAwaitingHead);
  REQUIRE(d.loop.run_until([&] { return first->closed() && second->closed(); }));
  for (const auto& s : {first, second}) {
    CHECK(s->state == H2Stream::State::kClosed);
    CHECK(s->error_code == 0);
    CHECK(s->response == H2Stream::Response::kWhole);
    CHECK(s->status == 200);
    CHECK(s->data == "hi");
    CHECK_FALSE(s->connection_broke());
  }
}

TEST_CASE("h2 stream: a refused stream is closed with REFUSED_STREAM and no head",
          "[exchange][h2]") {
  H2Server server({.refuse = 1});
  Direct d(server.port());
  auto s = d.open();
  REQUIRE(d.loop.run_until([&] { return s->closed(); }));
  CHECK(s->state == H2Stream::State::kClosed);
  CHECK(s->error_code == NGHTTP2_REFUSED_STREAM);
  CHECK_FALSE(s->head_done());
}

TEST_CASE("h2 stream: the connection breaking under it is kBroken", "[exchange][h2]") {
  H2Server server({.hang_up = true});
  Direct d(server.port());
  auto s = d.open();
  REQUIRE(d.loop.run_until([&] { return s->closed(); }));
  CHECK(s->state == H2Stream::State::kBroken);
  CHECK(s->connection_broke());
  CHECK_FALSE(s->head_done());
}

TEST_CASE("h2 stream: a connection never made is kConnectFailed, with why", "[exchange][h2]") {
  Direct d(test::closed_port());
  auto s = d.open();
  REQUIRE(d.loop.run_until([&] { return s->closed(); }));
  CHECK(s->state == H2Stream::State::kConnectFailed);
  CHECK(s->connect_failure.outcome == UpstreamOutcome::kConnectError);
  CHECK(s->connect_failure.reason.starts_with("connect failed: "));
  CHECK(d.wakes >= 1);
}

TEST_CASE("h2 connection: idle_timeout counts from the last stream's end", "[exchange][h2]") {
  H2Server server({});
  Direct d(server.port(), 300ms);
  auto first = d.open();
  REQUIRE(d.loop.run_until([&] { return first->closed(); }));
  // Idle from here: a stream before the timeout passes makes it busy again,
  // and the timer's first firing (300 ms after the first stream ended) finds
  // it idle for less than the timeout: it waits for the rest.
  d.loop.io.run_for(150ms);
  const auto second_start = std::chrono::steady_clock::now();
  auto second = d.open();
  REQUIRE(second);
  REQUIRE(d.loop.run_until([&] { return second->closed(); }));
  const auto idle_from = std::chrono::steady_clock::now();
  REQUIRE(d.loop.run_until([&] { return !d.conn->usable(); }, 5000ms));
  const auto closed_after = std::chrono::steady_clock::now() - idle_from;
  CHECK(closed_after >= 250ms);  // not the first stream's timeout
  CHECK(std::chrono::steady_clock::now() - second_start >= 300ms);
  CHECK(second->state == H2Stream::State::kClosed);
}
