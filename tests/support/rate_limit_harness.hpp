// The rate-limit middleware's test harness: a fake limiter whose completion
// the test fires by hand (later, on the test's io_context, as the real one
// would), a one-limit config, and the pipeline's side of the middleware that
// records the outcome, whether it came at once or later.
#pragma once

#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "gateway/config/load.hpp"
#include "gateway/metrics.hpp"
#include "middleware/ratelimit/local/fallback_store.hpp"
#include "middleware/ratelimit/metrics.hpp"
#include "middleware/ratelimit/rate_limit_middleware.hpp"

namespace sluice::testing {

class FakeLimiter final : public RateLimiter {
 public:
  void decide(const std::vector<LimitDescriptor>& descriptors, double cost,
              RateDecisionHandler handler) override {
    calls.push_back({descriptors, cost});
    pending = std::move(handler);
  }
  // With `at_once` set, answers it from decide_or_wait (as a local layer's
  // lease or remembered denial), the handler untouched.
  std::optional<RateDecision> decide_or_wait(const std::vector<LimitDescriptor>& descriptors,
                                             double cost, RateDecisionHandler& handler) override {
    if (!at_once) return RateLimiter::decide_or_wait(descriptors, cost, handler);
    calls.push_back({descriptors, cost});
    ++answered_at_once;
    return *at_once;
  }
  void refund(std::vector<BucketRefund> r, RefundHandler) override {
    refunds.insert(refunds.end(), r.begin(), r.end());
  }
  // Fires the pending completion as the real limiter would: later, on the executor.
  void complete(boost::asio::io_context& io, std::error_code ec, RateDecision decision) {
    REQUIRE(pending);
    boost::asio::post(io, [h = std::move(pending), ec, decision]() mutable {
      h(ec, std::move(decision));
    });
    pending = nullptr;
  }
  struct Call {
    std::vector<LimitDescriptor> descriptors;
    double cost;
  };
  std::vector<Call> calls;
  std::vector<BucketRefund> refunds;
  RateDecisionHandler pending;
  std::optional<RateDecision> at_once;
  int answered_at_once = 0;
};

inline std::shared_ptr<const Config> make_config(FailureMode mode, bool limited_route = true,
                                                 const std::string& api_key_header = "X-API-Key") {
  auto result = parse_config(R"(
api_keys: { header: ")" + api_key_header +
                                 R"(" }
upstreams:
  u: { servers: ["127.0.0.1:9"] }
limits:
  per_key: { key: api_key, capacity: 10, refill_per_second: 2 }
routes:
  - name: r
    match: { path_prefix: "/" }
    upstream: u
    limits: [per_key]
    cost: 2
)",
                             "t.yaml");
  REQUIRE(result.config);
  auto config = std::make_shared<Config>(*result.config);
  config->routes[0].on_redis_failure = mode;
  if (!limited_route) {
    config->routes[0].limits.clear();
    config->routes[0].limit_indexes.clear();
  }
  return config;
}

// The pipeline's side: hands out the completion and records the outcome,
// whether it came at once (kContinue / kRespond) or later.
struct Harness final : MiddlewareLater {
  explicit Harness(std::shared_ptr<const Config> config,
                   std::shared_ptr<FallbackStore> fallback = nullptr)
      : limiter(std::make_shared<FakeLimiter>()),
        middleware(std::make_shared<RateLimitMiddleware>(io.get_executor(), limiter, metrics,
                                                         std::move(fallback))) {
    ctx.config = std::move(config);
    ctx.route = &ctx.config->routes[0];
    ctx.method = "GET";
    ctx.target = "/orders?x=1";
    ctx.route_path = "/orders";
    // Header names as the config spells them; each header has `lines` lines.
    ctx.header = [this](std::string_view name) -> std::optional<std::string_view> {
      auto it = headers.find(std::string(name));
      if (it == headers.end()) return std::nullopt;
      return std::string_view{it->second};
    };
    ctx.header_count = [this](std::string_view name) -> std::size_t {
      return headers.count(std::string(name)) ? lines : 0;
    };
    ctx.client_ip = *parse_ip("10.1.2.3");
  }
  // A completion the test never fired holds the middleware, which holds the
  // limiter that holds the completion: dropped here, or it would leak.
  ~Harness() override { limiter->pending = nullptr; }
  MiddlewareDone take() override {
    ++taken;
    return [this](std::optional<LocalReply> r) {
      ++done_calls;
      reply = std::move(r);
    };
  }
  // The session's side of the watch: the test calls `gone` for a client that leaves.
  void watch_client(std::function<void()> g) override { gone = std::move(g); }
  void start() {
    auto result = middleware->on_request(ctx, *this);
    step = result.step;
    if (step == MiddlewareStep::kPending) {
      CHECK(taken == 1);
      CHECK(done_calls == 0);  // never completed inside the call
      return;
    }
    // A synchronous outcome takes no completion, or drops uncalled the one it
    // took for a decision that came at once.
    CHECK(taken == limiter->answered_at_once);
    CHECK(done_calls == 0);
    ++done_calls;
    reply = std::move(result.reply);
    CHECK(reply.has_value() == (step == MiddlewareStep::kRespond));
  }
  // Runs what is ready; restart() since a poll with nothing to do stops the context.
  void run() {
    io.restart();
    io.poll();
  }
  double metric(std::string_view family, std::string_view labels) {
    MetricsSnapshot snapshot;
    metrics.merge_into(snapshot);
    return snapshot.value(family, labels);
  }
  std::optional<std::string> header(std::string_view name) {
    for (auto& [n, v] : ctx.response_headers) {
      if (n == name) return v;
    }
    return std::nullopt;
  }

  boost::asio::io_context io;
  MetricsShard metrics;
  std::shared_ptr<FakeLimiter> limiter;
  std::shared_ptr<RateLimitMiddleware> middleware;  // held as in a chain (shared_from_this)
  RequestContext ctx;
  std::map<std::string, std::string> headers = {{"X-API-Key", "secret-key"}};
  std::size_t lines = 1;
  int done_calls = 0;
  int taken = 0;
  MiddlewareStep step = MiddlewareStep::kContinue;
  std::optional<LocalReply> reply;
  std::function<void()> gone;
};

inline RateDecision decision(bool allowed, double remaining, double to_cost, double to_full) {
  RateDecision d;
  d.allowed = allowed;
  d.limits.push_back(LimitState{allowed, remaining, to_cost, to_full});
  return d;
}

}  // namespace sluice::testing
