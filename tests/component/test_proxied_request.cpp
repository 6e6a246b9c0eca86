// The request object with a fake client leg: the middleware pipeline, a local
// reply, a client that leaves while a step is pending, and an exchange with a
// real loopback upstream that gets the head prepared once, each recorded
// once with the leg's protocol.
#include <catch2/catch.hpp>

#include <memory>
#include <thread>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include "gateway/client_ip.hpp"
#include "gateway/session/proxied_request.hpp"
#include "gateway/session/request_admission.hpp"
#include "gateway/worker.hpp"
#include "support/accept_loop.hpp"
#include "support/config_text.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace sluice;
using namespace std::chrono_literals;

namespace {

// A client leg that keeps what the request asked of it: its local replies,
// the response it relayed, how the exchange ended for it.
struct FakeLeg final : RequestLeg, std::enable_shared_from_this<FakeLeg> {
  explicit FakeLeg(Worker& worker)
      : executor(worker.io().get_executor()), request(worker, *this, executor) {}

  std::shared_ptr<void> keep_alive() override { return shared_from_this(); }
  std::string_view protocol() const override { return "TEST/1"; }
  bool closed() const override { return gone; }
  bool draining() const override { return false; }
  void set_deadline(Side, std::chrono::steady_clock::duration) override {}
  void send_local(LocalReply reply, bool close_after) override {
    local.push_back(reply.status);
    closes_after = close_after;
    request.set_local_status(reply.status);
    request.record(reply.status);
  }
  void relayed(bool keep) override {
    ++relays;
    kept = keep;
  }
  void cut(CutReason reason) override { cut_for = reason; }
  bool body_timed_out(beast::error_code) const override { return false; }
  std::optional<std::uint64_t> declared_length() const override { return std::nullopt; }
  void on_internal_error(std::string_view what) noexcept override { internal = what; }

  bool body_done() const override { return true; }
  bool body_at_hand() const override { return false; }
  bool expects_continue() const override { return false; }
  void send_continue() override { FAIL("no body to continue"); }
  void read_body(std::span<char>) override { FAIL("no body to read"); }
  void start_response(const ResponseStart& start) override { status = start.status; }
  void send_response(const char* data, std::size_t n, bool) override {
    body.append(data, n);
    asio::post(executor, [self = shared_from_this()] {
      self->request.exchange().on_response_sent({});
    });
  }
  bool keeps_client() const override { return true; }

  WorkerExecutor executor;
  ClientRequest head;
  std::vector<unsigned> local;
  bool closes_after = false;
  int relays = 0;
  bool kept = false;
  std::optional<CutReason> cut_for;
  std::string internal;
  unsigned status = 0;
  std::string body;
  bool gone = false;
  ProxiedRequest request;  // last: it goes first
};

struct Respond final : Middleware {
  explicit Respond(unsigned status) : status(status) {}
  MiddlewareResult on_request(RequestContext&, MiddlewareLater&) override {
    return MiddlewareResult::respond(LocalReply{status, "application/json", "{}", {}, false});
  }
  unsigned status;
};

// Goes pending and keeps its completion; learns if the client leaves.
struct Pending final : Middleware {
  MiddlewareResult on_request(RequestContext&, MiddlewareLater& later) override {
    done = later.take();
    later.watch_client([this] { ++told_gone; });
    return MiddlewareResult::pending();
  }
  MiddlewareDone done;
  int told_gone = 0;
};

struct Observer final : ExchangeObserver {
  void on_exchange(const Config&, const ExchangeSummary& s) override {
    summaries.push_back({std::string(s.protocol), s.status, s.local, std::string(s.upstream_server)});
  }
  struct Seen {
    std::string protocol;
    unsigned status;
    bool local;
    std::string upstream_server;
  };
  std::vector<Seen> summaries;
};

// A loopback upstream that answers every request head with 200 "ok" and
// keeps the heads it read.
struct Upstream {
  explicit Upstream(asio::io_context& io)
      : accept(io, {asio::ip::make_address("127.0.0.1"), 0}, [this](tcp::socket s) { serve(std::move(s)); }) {
    accept.do_accept();
  }
  void serve(tcp::socket socket) {
    auto s = std::make_shared<tcp::socket>(std::move(socket));
    auto buffer = std::make_shared<std::string>();
    asio::async_read_until(*s, asio::dynamic_buffer(*buffer), "\r\n\r\n",
                           [this, s, buffer](beast::error_code ec, std::size_t n) {
                             if (ec) return;
                             heads.push_back(buffer->substr(0, n));
                             static const std::string kReply =
                                 "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                             asio::async_write(*s, asio::buffer(kReply),
                                               [s](beast::error_code, std::size_t) {});
                           });
  }
  std::uint16_t port() const { return accept.local_endpoint().port(); }

  std::vector<std::string> heads;
  test::AcceptLoop<std::function<void(tcp::socket)>> accept;
};

std::uint16_t closed_port() {
  asio::io_context io;
  tcp::acceptor a{io, {asio::ip::make_address("127.0.0.1"), 0}};
  return a.local_endpoint().port();  // closed again when `a` goes
}

struct Fixture {
  explicit Fixture(std::uint16_t upstream_port)
      : config(testing::parse_ok(R"(
upstreams:
  app:
    servers: ["127.0.0.1:)" + std::to_string(upstream_port) + R"("]
routes:
  - name: all
    match: {path_prefix: /}
    upstream: app
)")),
        worker(0, config),
        leg(std::make_shared<FakeLeg>(worker)) {
    worker.chain().observers.push_back(observer);
    leg->request.set_peer(peer, "10.1.2.3");
  }

  // A GET for `target`, admitted as a session admits it, then run.
  void run(std::string_view target = "/a") {
    leg->head = ClientRequest{http::verb::get, target, 11};
    leg->head.set(http::field::host, "api.example");
    leg->request.set_config(config);
    leg->request.start();
    leg->request.set_head(&leg->head);
    REQUIRE_FALSE(admit_request(leg->head, {false, true}, peer, false, *config, leg->request.info()));
    leg->request.run();
  }

  template <class Pred>
  bool run_until(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!pred()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      worker.io().run_for(5ms);
    }
    return true;
  }

  IpAddress peer = *parse_ip("10.1.2.3");
  std::shared_ptr<const Config> config;
  Worker worker;
  std::shared_ptr<Observer> observer = std::make_shared<Observer>();
  std::shared_ptr<FakeLeg> leg;
};

}  // namespace

TEST_CASE("request object: a step's reply goes out through the leg, recorded once",
          "[proxied_request]") {
  Fixture f(closed_port());
  f.worker.chain().steps.push_back(std::make_shared<Respond>(429));
  f.run();
  CHECK(f.leg->local == std::vector<unsigned>{429});
  CHECK_FALSE(f.leg->closes_after);  // the body is done: the connection may go on
  REQUIRE(f.observer->summaries.size() == 1);
  CHECK(f.observer->summaries[0].protocol == "TEST/1");
  CHECK(f.observer->summaries[0].status == 429);
  CHECK(f.observer->summaries[0].local);
  f.leg->request.record(500);  // a second record is no second exchange
  CHECK(f.observer->summaries.size() == 1);
}

TEST_CASE("request object: a client that leaves while a step is pending sends nothing upstream",
          "[proxied_request]") {
  asio::io_context upstream_io;
  Upstream upstream(upstream_io);
  std::thread server([&] { upstream_io.run_for(300ms); });
  Fixture g(upstream.port());
  auto pending = std::make_shared<Pending>();
  g.worker.chain().steps.push_back(pending);
  g.run();
  REQUIRE(pending->done);
  g.leg->gone = true;  // the leg saw its client go, and tells the request
  g.leg->request.client_gone();
  CHECK(pending->told_gone == 1);
  g.leg->request.client_gone();  // told once
  CHECK(pending->told_gone == 1);
  pending->done(std::nullopt);  // the step lets the request through: too late
  g.worker.io().run_for(50ms);
  server.join();
  CHECK(upstream.heads.empty());
  CHECK(g.leg->local.empty());
  CHECK(g.leg->relays == 0);
}

TEST_CASE("request object: the exchange takes the head prepared once and ends relayed",
          "[proxied_request]") {
  asio::io_context upstream_io;
  Upstream upstream(upstream_io);
  std::thread server([&] { upstream_io.run_for(3s); });
  Fixture f(upstream.port());
  f.run("/orders?x=1");
  REQUIRE(f.run_until([&] { return f.leg->relays == 1; }));
  server.join();
  CHECK(f.leg->status == 200);
  CHECK(f.leg->body == "ok");
  CHECK(f.leg->kept);
  REQUIRE(upstream.heads.size() == 1);
  const std::string& head = upstream.heads[0];
  CHECK(head.starts_with("GET /orders?x=1 HTTP/1.1\r\nHost: api.example\r\n"));
  CHECK(head.find("X-Forwarded-For: 10.1.2.3\r\n") != std::string::npos);
  CHECK(head.find("X-Request-Id: " + f.leg->request.info().request_id + "\r\n") !=
        std::string::npos);
  CHECK(head.find("Via: 1.1 sluice\r\n") != std::string::npos);
  REQUIRE(f.observer->summaries.size() == 1);
  CHECK(f.observer->summaries[0].status == 200);
  CHECK_FALSE(f.observer->summaries[0].local);
  CHECK(f.observer->summaries[0].upstream_server ==
        "127.0.0.1:" + std::to_string(upstream.port()));
}

TEST_CASE("request object: an upstream that refuses becomes Sluice's 502 through the leg",
          "[proxied_request]") {
  Fixture f(closed_port());
  f.run();
  REQUIRE(f.run_until([&] { return !f.leg->local.empty(); }));
  CHECK(f.leg->local == std::vector<unsigned>{502});
  CHECK_FALSE(f.leg->closes_after);
  CHECK(f.leg->relays == 0);
  REQUIRE(f.observer->summaries.size() == 1);
  CHECK(f.observer->summaries[0].status == 502);
  CHECK(f.observer->summaries[0].local);
}
