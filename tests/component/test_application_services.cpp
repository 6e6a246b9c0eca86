// The real Application with a fake WorkerServicesFactory: every worker builds
// its own services on its own thread, /readyz shows the factory's merge of
// their states, /metrics calls before_scrape, and shutdown stops them all.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "gateway/application.hpp"
#include "gateway/config/load.hpp"
#include "gateway/worker_services.hpp"

namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using sluice::DependencyState;

struct Record {
  std::mutex mutex;
  std::set<std::thread::id> built_on;
  std::atomic<int> scrapes{0};
  std::atomic<int> stopped{0};
  std::atomic<int> destroyed{0};
  // While set, worker 1's readiness() blocks (up to 5 s) until it is cleared.
  std::atomic<bool> block_readiness{false};
  std::atomic<bool> blocked_call_returned{false};
  std::condition_variable released;
};

class FakeServices final : public sluice::WorkerServices {
 public:
  FakeServices(Record& record, std::size_t index) : record_(record), index_(index) {}
  ~FakeServices() override { ++record_.destroyed; }
  sluice::MiddlewareChain make_chain() override { return {}; }
  void before_scrape() override { ++record_.scrapes; }
  void on_stop() override { ++record_.stopped; }
  DependencyState readiness() const override {
    if (index_ == 1 && record_.block_readiness) {
      std::unique_lock lock(record_.mutex);
      record_.released.wait_for(lock, std::chrono::seconds(5),
                                [this] { return !record_.block_readiness; });
      record_.blocked_call_returned = true;
    }
    DependencyState state;
    state.ready = index_ == 0;
    state.circuit_open = index_ == 1;
    return state;
  }

 private:
  Record& record_;
  std::size_t index_;
};

class FakeFactory final : public sluice::WorkerServicesFactory {
 public:
  explicit FakeFactory(Record& record) : record_(record) {}
  std::unique_ptr<sluice::WorkerServices> make(const sluice::WorkerContext& worker) override {
    std::lock_guard lock(record_.mutex);
    record_.built_on.insert(std::this_thread::get_id());
    return std::make_unique<FakeServices>(record_, worker.index);
  }
  void seed_metrics(const sluice::Config&, sluice::MetricsShard& metrics) const override {
    metrics.declare("fake_seeded_total", "");
  }
  nlohmann::json readiness(const std::vector<DependencyState>& workers) const override {
    nlohmann::json states = nlohmann::json::array();
    for (const auto& w : workers) states.push_back({w.ready, w.circuit_open});
    return {{"workers", states}};
  }

 private:
  Record& record_;
};

http::response<http::string_body> get(std::uint16_t port, const std::string& target) {
  asio::io_context io;
  boost::beast::tcp_stream stream(io);
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, "a");
  http::write(stream, req);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res);
  return res;
}

// A two-worker Application with the fake services, running on its own thread
// until stop() (or the end of the test).
struct RunningApp {
  explicit RunningApp(Record& record)
      : config(sluice::parse_config(
                   "server: {listen: \"127.0.0.1:0\", threads: 2}\n"
                   "admin: {listen: \"127.0.0.1:0\"}\n"
                   "upstreams: {app: {servers: [\"127.0.0.1:9\"]}}\n"
                   "routes: [{name: all, match: {path_prefix: \"/\"}, upstream: app}]\n",
                   "test.yaml")
                   .config),
        app("test.yaml", config, options_for(record)) {
    REQUIRE(config);
    REQUIRE(app.start());
    runner = std::thread([this] { app.run(); });
  }
  ~RunningApp() { stop(); }

  void stop() {
    if (!runner.joinable()) return;
    app.request_stop();
    runner.join();
  }

  static sluice::ApplicationOptions options_for(Record& record) {
    sluice::ApplicationOptions options;
    options.services = std::make_shared<FakeFactory>(record);
    return options;
  }

  std::shared_ptr<const sluice::Config> config;
  sluice::Application app;
  std::thread runner;
};

}  // namespace

TEST_CASE("application: each worker owns services built on its own thread") {
  Record record;
  RunningApp running(record);
  sluice::Application& app = running.app;

  const auto ready = get(app.admin_port(), "/readyz");
  CHECK(ready.result() == http::status::ok);
  CHECK(ready.body() ==
        "{\"status\":\"ready\",\"dependencies\":{\"workers\":[[true,false],[false,true]]}}\n");
  const auto metrics = get(app.admin_port(), "/metrics");
  CHECK(metrics.body().find("fake_seeded_total 0") != std::string::npos);
  CHECK(record.scrapes.load() == 2);

  running.stop();
  CHECK(record.built_on.size() == 2);
  CHECK(record.built_on.count(std::this_thread::get_id()) == 0);
  CHECK(record.stopped.load() == 2);
  CHECK(record.destroyed.load() == 2);
}

TEST_CASE("application: /readyz answers while a worker is busy, with its last reported state") {
  Record record;
  RunningApp running(record);
  sluice::Application& app = running.app;

  // Worker 1 answers while free: not ready, circuit open (asked again, a few
  // times at most, should a loaded machine keep it past the deadline).
  const std::string answered =
      "{\"status\":\"ready\",\"dependencies\":{\"workers\":[[true,false],[false,true]]}}\n";
  auto first = get(app.admin_port(), "/readyz");
  for (int i = 0; i < 20 && first.body() != answered; ++i) first = get(app.admin_port(), "/readyz");
  CHECK(first.body() == answered);

  record.block_readiness = true;
  const auto busy = get(app.admin_port(), "/readyz");
  // The answer came while worker 1 was still blocked, not after it.
  CHECK_FALSE(record.blocked_call_returned.load());
  {
    std::lock_guard lock(record.mutex);
    record.block_readiness = false;
  }
  record.released.notify_all();
  CHECK(busy.result() == http::status::ok);
  // Worker 1 has not answered this time: it is shown with its last answer.
  CHECK(busy.body() == first.body());
  running.stop();
}
