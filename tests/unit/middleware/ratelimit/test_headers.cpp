// Rate-limit response headers and bodies, asserted as exact strings.
#include <catch2/catch.hpp>
#include <limits>
#include <string>
#include <vector>

#include "middleware/ratelimit/algorithms/limits.hpp"
#include "middleware/ratelimit/headers.hpp"

namespace {

using sluice::LimitDescriptor;
using sluice::LimitState;
using sluice::RateDecision;
using Headers = sluice::HeaderList;

const std::vector<LimitDescriptor> kSpecLimits = {{"per_key", "k1", 50, 10},
                                                  {"orders_global", "k2", 1000, 500}};

std::string header(const Headers& headers, const std::string& name) {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return "<absent>";
}

}  // namespace

TEST_CASE("headers: the spec example, first request", "[ratelimit][headers]") {
  // Decided by the twin: two fresh buckets, cost 1.
  std::vector<sluice::BucketState> states(2);
  const RateDecision d = sluice::decide_limits(states, kSpecLimits, 1, 0);
  REQUIRE(d.allowed);
  const Headers h = sluice::rate_limit_headers(kSpecLimits, 1, d);
  const Headers expected = {
      {"X-RateLimit-Limit", "50"},
      {"X-RateLimit-Remaining", "49"},
      {"X-RateLimit-Reset", "1"},
      {"RateLimit-Policy", R"("per_key";q=50;w=5, "orders_global";q=1000;w=2)"},
      {"RateLimit", R"("per_key";r=49;t=0, "orders_global";r=999;t=0)"},
  };
  CHECK(h == expected);
}

TEST_CASE("headers: the most restrictive limit is relative to capacity", "[ratelimit][headers]") {
  RateDecision d;
  d.allowed = true;
  d.limits = {{true, 40, 0, 1}, {true, 100, 0, 1.8}};  // 80% vs 10% left
  Headers h = sluice::rate_limit_headers(kSpecLimits, 1, d);
  CHECK(header(h, "X-RateLimit-Limit") == "1000");
  CHECK(header(h, "X-RateLimit-Remaining") == "100");
  CHECK(header(h, "X-RateLimit-Reset") == "2");
  CHECK(header(h, "RateLimit") == R"("per_key";r=40;t=0, "orders_global";r=100;t=0)");
  CHECK(header(h, "Retry-After") == "<absent>");
  CHECK(header(h, "Cache-Control") == "<absent>");

  d.limits = {{true, 5, 0, 4.5}, {true, 100, 0, 1.8}};  // a tie at 10%: the first wins
  h = sluice::rate_limit_headers(kSpecLimits, 1, d);
  CHECK(header(h, "X-RateLimit-Limit") == "50");
  CHECK(header(h, "X-RateLimit-Remaining") == "5");
  CHECK(header(h, "X-RateLimit-Reset") == "5");
}

TEST_CASE("headers: a denial", "[ratelimit][headers]") {
  RateDecision d;
  d.allowed = false;
  d.limits = {{false, 0.85, 0.015, 4.915}, {true, 999.5, 0, 0.001}};
  const Headers h = sluice::rate_limit_headers(kSpecLimits, 1, d);
  const Headers expected = {
      {"X-RateLimit-Limit", "50"},
      {"X-RateLimit-Remaining", "0"},
      {"X-RateLimit-Reset", "5"},
      {"RateLimit-Policy", R"("per_key";q=50;w=5, "orders_global";q=1000;w=2)"},
      {"RateLimit", R"("per_key";r=0;t=1, "orders_global";r=999;t=0)"},
      {"Retry-After", "1"},
      {"Cache-Control", "no-store"},
  };
  CHECK(h == expected);
  CHECK(sluice::too_many_requests_body(kSpecLimits, d) ==
        R"({"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",)"
        R"("title":"Too Many Requests","status":429,"violated-policies":["per_key"],)"
        R"("retry_after_ms":15})");
}

TEST_CASE("headers: retry after the slowest violated limit", "[ratelimit][headers]") {
  const std::vector<LimitDescriptor> limits = {
      {"a", "ka", 10, 1}, {"b", "kb", 1000, 2}, {"c", "kc", 5, 1}};
  RateDecision d;
  d.allowed = false;
  // b is the fuller bucket relatively, but violated; c has tokens, relatively fewer.
  d.limits = {{false, 0.5, 0.5, 9.5}, {false, 999, 1.5, 0.5}, {true, 1, 0, 4}};
  const Headers h = sluice::rate_limit_headers(limits, 2, d);
  CHECK(header(h, "Retry-After") == "2");
  // Only violated limits compete for X-RateLimit-*: a (5%) rather than c (20%) or b.
  CHECK(header(h, "X-RateLimit-Limit") == "10");
  CHECK(header(h, "X-RateLimit-Remaining") == "0");
  CHECK(header(h, "X-RateLimit-Reset") == "10");
  CHECK(header(h, "RateLimit-Policy") == R"("a";q=10;w=10, "b";q=1000;w=500, "c";q=5;w=5)");
  CHECK(header(h, "RateLimit") == R"("a";r=0;t=1, "b";r=999;t=2, "c";r=1;t=0)");
  CHECK(sluice::too_many_requests_body(limits, d) ==
        R"({"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",)"
        R"("title":"Too Many Requests","status":429,"violated-policies":["a","b"],)"
        R"("retry_after_ms":1500})");
}

TEST_CASE("headers: the spec's 429 example values", "[ratelimit][headers]") {
  const std::vector<LimitDescriptor> limits = {{"per_key", "k", 50, 10}};
  std::vector<sluice::BucketState> states = {{0, 0, true}};
  // Bucket empty, cost 15: 1.5 s until 15 tokens.
  const RateDecision d = sluice::decide_limits(states, limits, 15, 0);
  REQUIRE_FALSE(d.allowed);
  const Headers h = sluice::rate_limit_headers(limits, 15, d);
  CHECK(header(h, "Retry-After") == "2");
  CHECK(header(h, "RateLimit") == R"("per_key";r=0;t=2)");
  CHECK(header(h, "X-RateLimit-Reset") == "5");
  CHECK(sluice::too_many_requests_body(limits, d) ==
        R"({"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",)"
        R"("title":"Too Many Requests","status":429,"violated-policies":["per_key"],)"
        R"("retry_after_ms":1500})");
}

TEST_CASE("headers: rounding and edge values", "[ratelimit][headers]") {
  using sluice::ceil_seconds;
  using sluice::floor_tokens;
  CHECK(ceil_seconds(0) == 0);
  CHECK(ceil_seconds(0.0001) == 1);
  CHECK(ceil_seconds(1.0) == 1);
  CHECK(ceil_seconds(1.0000000000000002) == 1);  // float noise
  CHECK(ceil_seconds(1.01) == 2);
  CHECK(ceil_seconds(-3) == 0);
  CHECK(ceil_seconds(std::numeric_limits<double>::infinity()) == sluice::kMaxHeaderSeconds);
  CHECK(ceil_seconds(std::numeric_limits<double>::quiet_NaN()) == 0);
  CHECK(floor_tokens(48.99999999999999) == 49);
  CHECK(floor_tokens(48.9) == 48);
  CHECK(floor_tokens(0.5) == 0);
  CHECK(floor_tokens(-0.0) == 0);

  // w for a fractional rate; a wait that never ends is clamped, Retry-After >= 1.
  const std::vector<LimitDescriptor> limits = {{"slow", "k", 3, 0.4}};
  RateDecision d;
  d.allowed = false;
  d.limits = {{false, 2, std::numeric_limits<double>::infinity(), 2.5}};
  Headers h = sluice::rate_limit_headers(limits, 5, d);
  CHECK(header(h, "RateLimit-Policy") == R"("slow";q=3;w=8)");
  CHECK(header(h, "RateLimit") == R"("slow";r=2;t=1000000000)");
  CHECK(header(h, "Retry-After") == "1000000000");

  d.limits = {{false, 0.99, 0, 0}};  // inconsistent input still gives Retry-After 1
  h = sluice::rate_limit_headers(limits, 1, d);
  CHECK(header(h, "Retry-After") == "1");

  CHECK(sluice::rate_limit_headers({}, 1, RateDecision{true, {}}).empty());
}

TEST_CASE("headers: structured-field string escaping", "[ratelimit][headers]") {
  CHECK(sluice::sf_string("per_key") == R"("per_key")");
  CHECK(sluice::sf_string(R"(a"b\c)") == R"("a\"b\\c")");
  CHECK(sluice::sf_string("tab\there\x7f\xc3\xa9") == R"("tab?here???")");

  const std::vector<LimitDescriptor> limits = {{R"(we"ird\)", "k", 1, 1}};
  RateDecision d;
  d.allowed = false;
  d.limits = {{false, 0, 1, 1}};
  const Headers h = sluice::rate_limit_headers(limits, 1, d);
  CHECK(header(h, "RateLimit-Policy") == R"("we\"ird\\";q=1;w=1)");
  CHECK(sluice::too_many_requests_body(limits, d).find(R"("violated-policies":["we\"ird\\"])") !=
        std::string::npos);
}

TEST_CASE("headers: the fail-closed 503 body", "[ratelimit][headers]") {
  CHECK(sluice::rate_limit_unavailable_body() ==
        R"({"type":"about:blank","title":"Service Unavailable","status":503,)"
        R"("detail":"rate limiter unavailable"})");
  CHECK(sluice::kProblemJsonContentType == "application/problem+json");
}

TEST_CASE("headers: a sliding window: its capacity, its window, the wait for it to slide",
          "[ratelimit][headers][sliding_window]") {
  LimitDescriptor per_minute{"per_minute", "k", 100, 0};
  per_minute.algorithm = sluice::LimitAlgorithm::kSlidingWindow;
  per_minute.window_seconds = 60;
  const std::vector<LimitDescriptor> limits = {per_minute};
  // Decided by the twin 20 s into a window, the previous one having counted 100.
  constexpr std::int64_t kWindow = 60'000'000;
  std::vector<sluice::BucketState> states = {{0, 1000, true, 100}};
  const RateDecision d = sluice::decide_limits(states, limits, 40, 1000 * kWindow + kWindow / 3);
  REQUIRE_FALSE(d.allowed);  // estimate 66.7 + 40 > 100
  const Headers h = sluice::rate_limit_headers(limits, 40, d);
  CHECK(header(h, "X-RateLimit-Limit") == "100");
  CHECK(header(h, "X-RateLimit-Remaining") == "33");
  CHECK(header(h, "RateLimit-Policy") == R"("per_minute";q=100;w=60)");
  // Room for 40 once the previous 100 weigh 60: 24 s into the window, 4 s from now.
  CHECK(header(h, "RateLimit") == R"("per_minute";r=33;t=4)");
  CHECK(header(h, "Retry-After") == "4");
  CHECK(header(h, "X-RateLimit-Reset") == "40");

  // Over capacity after a reservation: the remaining count shows 0, never negative.
  RateDecision over;
  over.allowed = true;
  over.limits = {{false, -3, 5, 70}};
  CHECK(header(sluice::rate_limit_headers(limits, 1, over), "X-RateLimit-Remaining") == "0");
}

TEST_CASE("headers: appended to a reused list, the same headers in the same strings",
          "[ratelimit][headers]") {
  RateDecision d;
  d.allowed = false;
  d.limits = {{false, 0.85, 0.015, 4.915}, {true, 999.5, 0, 0.001}};
  const Headers fresh = sluice::rate_limit_headers(kSpecLimits, 1, d);
  Headers reused{{"Earlier", "a value"}};
  reused.clear();
  sluice::append_rate_limit_headers(reused, kSpecLimits, 1, d);
  CHECK(reused == fresh);
  const char* policy = reused[3].second.data();
  reused.clear();
  sluice::append_rate_limit_headers(reused, kSpecLimits, 1, d);
  CHECK(reused == fresh);
  CHECK(reused[3].second.data() == policy);  // refilled in place, not allocated again
}

TEST_CASE("headers: client_headers hides a limit from one family or from both",
          "[ratelimit][headers][client_headers]") {
  // per_key (50) is short, orders_global (1000) is not.
  std::vector<LimitDescriptor> limits = kSpecLimits;
  std::vector<sluice::BucketState> states(2);
  states[0].tokens = 0;
  states[0].timestamp_us = 0;
  states[0].exists = true;
  const RateDecision denied = sluice::decide_limits(states, limits, 1, 0);
  REQUIRE_FALSE(denied.allowed);

  SECTION("none on the short limit: its 429 shows Retry-After only, nothing of the other") {
    limits[0].show_legacy = limits[0].show_ietf = false;
    const Headers h = sluice::rate_limit_headers(limits, 1, denied);
    const Headers expected = {{"Retry-After", "1"}, {"Cache-Control", "no-store"}};
    CHECK(h == expected);
    // Admitted, the shown limit is shown and the hidden one is not.
    std::vector<sluice::BucketState> full(2);
    const RateDecision admitted = sluice::decide_limits(full, limits, 1, 0);
    REQUIRE(admitted.allowed);
    const Headers ok = sluice::rate_limit_headers(limits, 1, admitted);
    CHECK(header(ok, "X-RateLimit-Limit") == "1000");
    CHECK(header(ok, "RateLimit-Policy") == R"("orders_global";q=1000;w=2)");
    const std::string body = sluice::too_many_requests_body(limits, denied, 429);
    CHECK(body.find("\"violated-policies\":[]") != std::string::npos);
  }
  SECTION("none on both: Retry-After and Cache-Control only") {
    for (auto& l : limits) l.show_legacy = l.show_ietf = false;
    const Headers h = sluice::rate_limit_headers(limits, 1, denied);
    const Headers expected = {{"Retry-After", "1"}, {"Cache-Control", "no-store"}};
    CHECK(h == expected);
  }
  SECTION("ietf: the lists only") {
    for (auto& l : limits) l.show_legacy = false;
    const Headers h = sluice::rate_limit_headers(limits, 1, denied);
    CHECK(header(h, "X-RateLimit-Limit") == "<absent>");
    CHECK(header(h, "RateLimit-Policy") == R"("per_key";q=50;w=5, "orders_global";q=1000;w=2)");
  }
  SECTION("legacy: the trio only, for the short limit") {
    for (auto& l : limits) l.show_ietf = false;
    const Headers h = sluice::rate_limit_headers(limits, 1, denied);
    CHECK(header(h, "X-RateLimit-Limit") == "50");
    CHECK(header(h, "RateLimit") == "<absent>");
    CHECK(header(h, "RateLimit-Policy") == "<absent>");
  }
}
