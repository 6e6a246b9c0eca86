// The rate-limit middleware against a fake limiter whose completion the test
// fires by hand: allowed, limited, error + fail-open,
// error + fail-closed, error + local fallback, routes without limits, and
// requests refused before the limiter is asked (a repeated or malformed key source).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/fallback_store.hpp"
#include "middleware/ratelimit/metrics.hpp"
#include "support/rate_limit_harness.hpp"

using namespace sluice;
using namespace sluice::testing;

TEST_CASE("allowed: continues with rate-limit headers", "[ratelimit][middleware]") {
  Harness h(make_config(FailureMode::kOpen));
  h.start();
  CHECK(h.step == MiddlewareStep::kPending);
  h.run();
  CHECK(h.done_calls == 0);  // nothing completes until the limiter does
  REQUIRE(h.limiter->calls.size() == 1);
  const auto& call = h.limiter->calls[0];
  CHECK(call.cost == 2);
  REQUIRE(call.descriptors.size() == 1);
  CHECK(call.descriptors[0].limit == "per_key");
  CHECK(call.descriptors[0].capacity == 10);
  CHECK(sluice::bucket_name(call.descriptors[0]).find("secret-key") == std::string::npos);
  h.limiter->complete(h.io, {}, decision(true, 8, 0, 1));
  h.run();
  CHECK(h.done_calls == 1);
  CHECK_FALSE(h.reply);
  CHECK(h.header("X-RateLimit-Remaining") == "8");
  CHECK(h.header("X-RateLimit-Limit") == "10");
  CHECK(h.metric("sluice_ratelimit_decisions_total",
                 "route=\"r\",limit=\"per_key\",decision=\"allowed\"") == 1);
}

TEST_CASE("limited: answers 429 problem+json", "[ratelimit][middleware]") {
  Harness h(make_config(FailureMode::kOpen));
  h.start();
  h.limiter->complete(h.io, {}, decision(false, 1, 0.5, 4.5));
  h.run();
  REQUIRE(h.reply);
  CHECK(h.reply->status == 429);
  CHECK(h.reply->content_type == "application/problem+json");
  CHECK(h.reply->body.find("\"violated-policies\":[\"per_key\"]") != std::string::npos);
  CHECK(h.header("Retry-After") == "1");
  CHECK(h.metric("sluice_ratelimit_decisions_total",
                 "route=\"r\",limit=\"per_key\",decision=\"limited\"") == 1);
}

TEST_CASE("a decision the limiter has at once (a lease) continues at once, nothing posted",
          "[ratelimit][middleware]") {
  Harness h(make_config(FailureMode::kOpen));
  RateDecision leased = decision(true, 7, 0, 1.5);
  leased.local = LocalDecision::kLease;
  h.limiter->at_once = leased;
  h.start();
  CHECK(h.step == MiddlewareStep::kContinue);
  CHECK_FALSE(h.reply);
  CHECK_FALSE(h.limiter->pending);  // the handler was not taken
  CHECK(h.header("X-RateLimit-Remaining") == "7");
  CHECK(h.metric("sluice_ratelimit_decisions_total",
                 "route=\"r\",limit=\"per_key\",decision=\"allowed\"") == 1);
  CHECK(h.metric("sluice_ratelimit_local_decisions_total", "route=\"r\",kind=\"lease\"") == 1);
  // Nothing was posted: the dropped completion is never called.
  h.run();
  CHECK(h.done_calls == 1);
}

TEST_CASE("a remembered denial answers 429 at once", "[ratelimit][middleware]") {
  Harness h(make_config(FailureMode::kOpen));
  RateDecision denied = decision(false, 0.5, 0.75, 4.75);
  denied.local = LocalDecision::kDenyCache;
  h.limiter->at_once = denied;
  h.start();
  CHECK(h.step == MiddlewareStep::kRespond);
  REQUIRE(h.reply);
  CHECK(h.reply->status == 429);
  CHECK(h.header("Retry-After") == "1");
  CHECK(h.metric("sluice_ratelimit_decisions_total",
                 "route=\"r\",limit=\"per_key\",decision=\"limited\"") == 1);
  CHECK(h.metric("sluice_ratelimit_local_decisions_total",
                 "route=\"r\",kind=\"deny_cache\"") == 1);
  h.run();
  CHECK(h.done_calls == 1);
}

TEST_CASE("limiter error + fail-open: continues without headers", "[ratelimit][middleware]") {
  Harness h(make_config(FailureMode::kOpen));
  h.start();
  h.limiter->complete(h.io, std::make_error_code(std::errc::timed_out), {});
  h.run();
  CHECK(h.done_calls == 1);
  CHECK_FALSE(h.reply);
  CHECK(h.ctx.response_headers.empty());
  CHECK(h.metric("sluice_ratelimit_fail_open_total", "route=\"r\"") == 1);
}

TEST_CASE("limiter error + fail-closed: answers 503", "[ratelimit][middleware]") {
  Harness h(make_config(FailureMode::kClosed));
  h.start();
  h.limiter->complete(h.io, std::make_error_code(std::errc::connection_refused), {});
  h.run();
  REQUIRE(h.reply);
  CHECK(h.reply->status == 503);
  CHECK(h.reply->content_type == "application/problem+json");
  CHECK(h.metric("sluice_ratelimit_fail_closed_total", "route=\"r\"") == 1);
  CHECK(h.header("Retry-After") == std::nullopt);  // on the reply, not queued for a response
  REQUIRE(std::find(h.reply->headers.begin(), h.reply->headers.end(),
                    std::pair<std::string, std::string>{"Retry-After", "1"}) !=
          h.reply->headers.end());  // nothing known about the outage: at least 1 s
}

TEST_CASE("fail-closed 503: Retry-After is the breaker's open time left, rounded up",
          "[ratelimit][middleware]") {
  Harness h(make_config(FailureMode::kClosed));
  h.start();
  RateDecision unavailable;
  unavailable.unavailable_seconds = 2.2;
  h.limiter->complete(h.io, std::make_error_code(std::errc::connection_refused), unavailable);
  h.run();
  REQUIRE(h.reply);
  CHECK(h.reply->status == 503);
  std::optional<std::string> retry_after;
  for (const auto& [name, value] : h.reply->headers) {
    if (name == "Retry-After") retry_after = value;
  }
  CHECK(retry_after == "3");

  RateDecision d;
  d.unavailable_seconds = 0;
  CHECK(unavailable_retry_after(d) == 1);
  d.unavailable_seconds = 0.001;
  CHECK(unavailable_retry_after(d) == 1);
  d.unavailable_seconds = 1.0;
  CHECK(unavailable_retry_after(d) == 1);
  d.unavailable_seconds = 1.001;
  CHECK(unavailable_retry_after(d) == 2);
}

TEST_CASE("limiter error + local: the instance's share decides; Redis' next decision clears it",
          "[ratelimit][middleware]") {
  // per_key: capacity 10, refill 2/s, cost 2; two instances: a share of 5 at 1/s.
  const auto config = make_config(FailureMode::kLocal);
  auto fallback = std::make_shared<FallbackStore>();
  fallback->set_configured_fleet_size(2);
  const auto fail = [&] {
    auto h = std::make_unique<Harness>(config, fallback);
    h->start();
    CHECK(h->step == MiddlewareStep::kPending);
    h->limiter->complete(h->io, std::make_error_code(std::errc::connection_refused), {});
    h->run();
    CHECK(h->done_calls == 1);
    CHECK(h->metric("sluice_ratelimit_fail_local_total", "route=\"r\"") == 1);
    CHECK(h->metric("sluice_ratelimit_fail_closed_total", "route=\"r\"") == 0);
    return h;
  };
  for (const char* remaining : {"3", "1"}) {
    auto h = fail();
    CHECK_FALSE(h->reply);
    CHECK(h->header("X-RateLimit-Remaining") == remaining);
    CHECK(h->metric("sluice_ratelimit_decisions_total",
                    "route=\"r\",limit=\"per_key\",decision=\"allowed\"") == 1);
  }
  auto limited = fail();
  REQUIRE(limited->reply);
  CHECK(limited->reply->status == 429);
  CHECK(limited->header("Retry-After") == "1");  // 1 token short at 1/s
  CHECK(limited->metric("sluice_ratelimit_decisions_total",
                        "route=\"r\",limit=\"per_key\",decision=\"limited\"") == 1);
  CHECK(fallback->size() == 1);

  // A lease spent locally says nothing of Redis now: the local buckets stay.
  Harness leased(config, fallback);
  leased.start();
  RateDecision from_lease = decision(true, 8, 0, 1);
  from_lease.local = LocalDecision::kLease;
  leased.limiter->complete(leased.io, {}, from_lease);
  leased.run();
  CHECK_FALSE(leased.reply);
  CHECK(fallback->size() == 1);

  // Redis decides again: the local buckets go.
  Harness back(config, fallback);
  back.start();
  back.limiter->complete(back.io, {}, decision(true, 8, 0, 1));
  back.run();
  CHECK_FALSE(back.reply);
  CHECK(back.metric("sluice_ratelimit_fail_local_total", "route=\"r\"") == 0);
  CHECK(fallback->size() == 0);
  CHECK_FALSE(fail()->reply);  // a full share again

  SECTION("without a fallback store a local route fails closed") {
    Harness h(config);
    h.start();
    h.limiter->complete(h.io, std::make_error_code(std::errc::connection_refused), {});
    h.run();
    REQUIRE(h.reply);
    CHECK(h.reply->status == 503);
  }
  SECTION("seeded: fail_local for a local route, not fail_open or fail_closed") {
    MetricsShard shard;
    seed_rate_limit_metrics(*config, shard);
    MetricsSnapshot snapshot;
    shard.merge_into(snapshot);
    CHECK(snapshot.has("sluice_ratelimit_fail_local_total", "route=\"r\""));
    CHECK_FALSE(snapshot.has("sluice_ratelimit_fail_open_total", "route=\"r\""));
    CHECK_FALSE(snapshot.has("sluice_ratelimit_fail_closed_total", "route=\"r\""));
  }
}

TEST_CASE("a route without limits never calls the limiter", "[ratelimit][middleware]") {
  Harness h(make_config(FailureMode::kOpen, false));
  h.start();
  CHECK(h.step == MiddlewareStep::kContinue);  // at once, nothing posted
  CHECK(h.done_calls == 1);
  h.run();
  CHECK(h.done_calls == 1);
  CHECK_FALSE(h.reply);
  CHECK(h.limiter->calls.empty());
}

TEST_CASE("two API key lines: 400 that closes, limiter not asked", "[ratelimit][middleware]") {
  Harness h(make_config(FailureMode::kOpen));
  h.lines = 2;
  h.ctx.request_id = "rid-1";
  h.start();
  CHECK(h.step == MiddlewareStep::kRespond);  // at once, nothing posted
  CHECK(h.done_calls == 1);
  h.run();
  CHECK(h.done_calls == 1);
  CHECK(h.limiter->calls.empty());
  REQUIRE(h.reply);
  CHECK(h.reply->status == 400);
  CHECK(h.reply->close_connection);
  CHECK(h.reply->content_type == "application/json");
  CHECK(h.reply->body.find("\"message\":\"more than one X-API-Key header\"") != std::string::npos);
  CHECK(h.reply->body.find("\"request_id\":\"rid-1\"") != std::string::npos);
  CHECK(h.reply->body.find("secret-key") == std::string::npos);
  CHECK(h.ctx.response_headers.empty());
  CHECK(h.metric("sluice_ratelimit_rejected_total", "route=\"r\",reason=\"duplicate_identity\"") ==
        1);
  CHECK(h.metric("sluice_ratelimit_missing_key_total", "route=\"r\",source=\"api_key\"") == 0);
}

TEST_CASE("malformed Authorization: 400, limiter not asked", "[ratelimit][middleware]") {
  Harness h(make_config(FailureMode::kOpen, true, "Authorization"));
  h.headers = {{"Authorization", "Bearer secret-key,"}};
  h.start();
  h.run();
  CHECK(h.limiter->calls.empty());
  REQUIRE(h.reply);
  CHECK(h.reply->status == 400);
  CHECK(h.reply->close_connection);
  CHECK(h.reply->body.find("malformed Authorization header") != std::string::npos);
  CHECK(h.reply->body.find("secret-key") == std::string::npos);
  CHECK(h.metric("sluice_ratelimit_rejected_total",
                 "route=\"r\",reason=\"malformed_authorization\"") == 1);

  SECTION("a well-formed Bearer token is keyed as before") {
    Harness ok(make_config(FailureMode::kOpen, true, "Authorization"));
    ok.headers = {{"Authorization", "bearer  secret-key "}};
    ok.start();
    ok.run();
    REQUIRE(ok.limiter->calls.size() == 1);
    Harness plain(make_config(FailureMode::kOpen, true, "Authorization"));
    plain.headers = {{"Authorization", "Bearer secret-key"}};
    plain.start();
    plain.run();
    REQUIRE(plain.limiter->calls.size() == 1);
    CHECK(ok.limiter->calls[0].descriptors[0].key_hash ==
          plain.limiter->calls[0].descriptors[0].key_hash);
    CHECK(ok.metric("sluice_ratelimit_rejected_total",
                    "route=\"r\",reason=\"malformed_authorization\"") == 0);
    // Unfired completions hold the middleware, which holds the limiter.
    ok.limiter->pending = nullptr;
    plain.limiter->pending = nullptr;
  }
}

TEST_CASE("metrics render in Prometheus text format", "[metrics]") {
  // The rate limiter's families, as the middleware's services declare them.
  register_metric_families(rate_limit_metric_families());
  register_metric_families(rate_limit_metric_families());  // twice: kept once
  std::size_t declared = 0;
  for (const auto& family : metric_families()) declared += family.name == "sluice_redis_up";
  CHECK(declared == 1);
  MetricsShard a, b;
  a.add("sluice_http_requests_total", labels("route", "r", "code", "200"));
  b.add("sluice_http_requests_total", labels("route", "r", "code", "200"), 2);
  a.set("sluice_redis_up", "", 1);
  b.set("sluice_redis_up", "", 0);
  a.observe("sluice_ratelimit_check_duration_seconds", "", 0.0003);
  MetricsSnapshot s;
  a.merge_into(s);
  b.merge_into(s);
  auto text = s.render();
  CHECK(text.find("# TYPE sluice_http_requests_total counter\n") != std::string::npos);
  CHECK(text.find("sluice_http_requests_total{route=\"r\",code=\"200\"} 3\n") != std::string::npos);
  CHECK(text.find("sluice_redis_up 0\n") != std::string::npos);  // all workers must be up
  CHECK(text.find("sluice_ratelimit_check_duration_seconds_bucket{le=\"0.00025\"} 0\n") !=
        std::string::npos);
  CHECK(text.find("sluice_ratelimit_check_duration_seconds_bucket{le=\"0.0005\"} 1\n") !=
        std::string::npos);
  CHECK(text.find("sluice_ratelimit_check_duration_seconds_count 1\n") != std::string::npos);
  CHECK(text.find("# TYPE sluice_config_reloads_total counter\n") != std::string::npos);
  CHECK(text.find("# TYPE sluice_ratelimit_rejected_total counter\n") != std::string::npos);
  CHECK(label("route", "a\"b\\c") == "route=\"a\\\"b\\\\c\"");
}
