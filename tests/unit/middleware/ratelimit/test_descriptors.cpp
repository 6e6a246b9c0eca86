// Rate-limit key extraction: identity checks, key values and bucket names.
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "middleware/ratelimit/descriptors.hpp"
#include "support/request_view_fixture.hpp"

namespace {

using sluice::ApiKeysConfig;
using sluice::IpAddress;
using sluice::KeySource;
using sluice::LimitConfig;
using sluice::RequestView;
using Kind = sluice::KeySource::Kind;
using sluice::testing::ipv4;
using sluice::testing::make_limit;
using sluice::testing::Request;
using sluice::testing::with_consumers;

std::string hash_input(const LimitConfig& limit, const Request& request,
                       std::optional<std::string_view> api_key = std::nullopt) {
  return sluice::limit_key_value(limit, request.view(), api_key).hash_input;
}

// The descriptors of `request` on `route`, identified as the middleware does.
sluice::RateLimitKeys route_keys(const sluice::Config& config, const sluice::RouteConfig& route,
                                 const Request& request) {
  const RequestView view = request.view();
  return sluice::build_route_descriptors(config, route, view,
                                         sluice::identify(view, config.api_keys));
}

}  // namespace

TEST_CASE("key values: sources, composite keys and fallback to IP", "[ratelimit][keys]") {
  Request request;
  request.query = "tenant=acme&x=1";
  request.header("X-User", "alice");

  const LimitConfig by_ip = make_limit("l", {{Kind::kIp, ""}});
  const LimitConfig by_key = make_limit("l", {{Kind::kApiKey, ""}});
  const LimitConfig by_header = make_limit("l", {{Kind::kHeader, "X-User"}});
  const LimitConfig by_query = make_limit("l", {{Kind::kQuery, "tenant"}});
  const LimitConfig by_path = make_limit("l", {{Kind::kPath, ""}});
  const LimitConfig by_route = make_limit("l", {{Kind::kRoute, ""}});
  const LimitConfig global = make_limit("l", {{Kind::kGlobal, ""}});

  SECTION("every source gives a distinct value") {
    std::set<std::string> values = {
        hash_input(by_ip, request),     hash_input(by_key, request, "k1"),
        hash_input(by_header, request), hash_input(by_query, request),
        hash_input(by_path, request),   hash_input(by_route, request),
        hash_input(global, request)};
    CHECK(values.size() == 7);
  }

  SECTION("present sources do not fall back") {
    for (const LimitConfig* limit : {&by_header, &by_query, &by_path, &by_route, &global}) {
      CHECK_FALSE(sluice::limit_key_value(*limit, request.view(), std::nullopt).fell_back);
    }
    CHECK_FALSE(sluice::limit_key_value(by_key, request.view(), "k1").fell_back);
  }

  SECTION("missing sources fall back to the client IP and are reported") {
    auto v = sluice::limit_key_value(by_key, request.view(), std::nullopt);
    CHECK(v.fell_back);
    CHECK(v.missing_kind == Kind::kApiKey);
    CHECK(v.hash_input == hash_input(by_ip, request));

    const LimitConfig no_header = make_limit("l", {{Kind::kHeader, "X-Absent"}});
    v = sluice::limit_key_value(no_header, request.view(), std::nullopt);
    CHECK(v.fell_back);
    CHECK(v.missing_kind == Kind::kHeader);
    CHECK(v.missing_name == "X-Absent");
    CHECK(v.hash_input == hash_input(by_ip, request));

    const LimitConfig no_query = make_limit("l", {{Kind::kQuery, "absent"}});
    v = sluice::limit_key_value(no_query, request.view(), std::nullopt);
    CHECK(v.fell_back);
    CHECK(v.missing_kind == Kind::kQuery);
    CHECK(v.hash_input == hash_input(by_ip, request));

    request.header("X-User", "  ");  // empty after trimming
    CHECK(sluice::limit_key_value(by_header, request.view(), std::nullopt).fell_back);
  }

  SECTION("written into a reused value, nothing of the last one is left") {
    sluice::LimitKeyValue into;
    const LimitConfig no_header = make_limit("l", {{Kind::kHeader, "X-Absent"}});
    sluice::limit_key_value(into, no_header, request.view(), std::nullopt);
    CHECK(into.fell_back);
    CHECK(into.missing_name == "X-Absent");
    sluice::limit_key_value(into, by_key, request.view(), "k1");
    CHECK_FALSE(into.fell_back);
    CHECK(into.missing_name.empty());
    CHECK(into.hash_input == hash_input(by_key, request, "k1"));
  }

  SECTION("a header value equal to the IP text never equals the IP source") {
    request.header("X-User", "1.2.3.4");
    CHECK(hash_input(by_header, request) != hash_input(by_ip, request));
    const LimitConfig by_query_ip = make_limit("l", {{Kind::kQuery, "ip"}});
    request.query = "ip=1.2.3.4";
    CHECK(hash_input(by_query_ip, request) != hash_input(by_ip, request));
    CHECK(hash_input(by_key, request, "1.2.3.4") != hash_input(by_ip, request));
  }

  SECTION("header names are case-insensitive, values are not") {
    const LimitConfig lower_name = make_limit("l", {{Kind::kHeader, "x-user"}});
    CHECK(hash_input(lower_name, request) == hash_input(by_header, request));
    Request other = request;
    other.header("X-User", "Alice");
    CHECK(hash_input(by_header, other) != hash_input(by_header, request));
  }

  SECTION("composite keys: parts cannot run together") {
    const LimitConfig composite = make_limit("l", {{Kind::kHeader, "A"}, {Kind::kHeader, "B"}});
    Request r1;
    r1.header("A", "ab").header("B", "c");
    Request r2;
    r2.header("A", "a").header("B", "bc");
    CHECK(hash_input(composite, r1) != hash_input(composite, r2));

    const LimitConfig key_path = make_limit("l", {{Kind::kApiKey, ""}, {Kind::kPath, ""}});
    Request other_path = request;
    other_path.path = "/api/orders/2";
    CHECK(hash_input(key_path, request, "k1") != hash_input(key_path, other_path, "k1"));
    CHECK(hash_input(key_path, request, "k1") != hash_input(key_path, request, "k2"));

    // A missing part is replaced by the IP; the other parts stay.
    auto v = sluice::limit_key_value(key_path, request.view(), std::nullopt);
    CHECK(v.fell_back);
    CHECK(v.missing_kind == Kind::kApiKey);
    const LimitConfig ip_path = make_limit("l", {{Kind::kIp, ""}, {Kind::kPath, ""}});
    CHECK(v.hash_input == hash_input(ip_path, request));
    CHECK(v.hash_input != hash_input(ip_path, other_path));
  }

  SECTION("equivalent query spellings give the same value") {
    request.query = "tenant=a+b";
    const std::string plus = hash_input(by_query, request);
    request.query = "tenant=a%20b";
    CHECK(hash_input(by_query, request) == plus);
    request.query = "x=1&t%65nant=a%20%62";
    CHECK(hash_input(by_query, request) == plus);
    request.query = "tenant=a%2Bb";
    CHECK(hash_input(by_query, request) != plus);
  }

  SECTION("different client IPs give different values") {
    Request other = request;
    other.ip = ipv4(1, 2, 3, 5);
    CHECK(hash_input(by_ip, other) != hash_input(by_ip, request));
  }
}

TEST_CASE("bucket names: limit name and a 128-bit hash", "[ratelimit][keys]") {
  const sluice::LimitDescriptor d{"per_key", sluice::key_hash("k6:secret"), 1, 1};
  const std::string name = sluice::bucket_name(d);
  REQUIRE(name.size() == std::string("per_key:").size() + 32);
  CHECK(name.rfind("per_key:", 0) == 0);
  CHECK(name.find_first_not_of("0123456789abcdef", 8) == std::string::npos);
  CHECK(name.find("secret") == std::string::npos);
  // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
  CHECK(sluice::bucket_name({"l", sluice::key_hash("abc"), 1, 1}) ==
        "l:ba7816bf8f01cfea414140de5dae2223");
  CHECK(sluice::key_hash("abd") != sluice::key_hash("abc"));
}

TEST_CASE("descriptors for a route: plans and no raw values", "[ratelimit][keys]") {
  sluice::Config config;
  config.api_keys = with_consumers();
  LimitConfig per_key = make_limit("per_key", {{Kind::kApiKey, ""}}, 50, 10);
  per_key.plans["pro"] = {500, 100};
  config.limits = {per_key, make_limit("per_ip", {{Kind::kIp, ""}}, 20, 5),
                   make_limit("orders_global", {{Kind::kGlobal, ""}}, 1000, 500)};
  sluice::RouteConfig route;
  route.name = "orders";
  route.limits = {"per_key", "orders_global"};

  Request request;
  SECTION("a known consumer gets its plan") {
    request.header("X-API-Key", "demo-pro-key");
    auto keys = route_keys(config, route, request);
    CHECK(keys.plan == "pro");
    CHECK(keys.has_api_key);
    REQUIRE(keys.descriptors.size() == 2);
    CHECK(keys.descriptors[0].limit == "per_key");
    CHECK(keys.descriptors[0].capacity == 500);
    CHECK(keys.descriptors[0].refill_per_second == 100);
    CHECK(keys.descriptors[1].limit == "orders_global");
    CHECK(keys.descriptors[1].capacity == 1000);
    CHECK(keys.descriptors[1].refill_per_second == 500);
    for (const auto& d : keys.descriptors) {
      CHECK(sluice::bucket_name(d).find("demo-pro-key") == std::string::npos);
      CHECK(sluice::bucket_name(d).rfind(d.limit + ":", 0) == 0);
    }
    REQUIRE(keys.values.size() == 2);
    CHECK_FALSE(keys.values[0].fell_back);
    CHECK(keys.values[0].hash_input.empty());
  }
  SECTION("an unknown key falls back to IP on the default plan") {
    request.header("X-API-Key", "made-up");
    auto keys = route_keys(config, route, request);
    CHECK(keys.plan == "free");
    CHECK_FALSE(keys.has_api_key);
    CHECK(keys.descriptors[0].capacity == 50);
    CHECK(keys.values[0].fell_back);
    CHECK(keys.values[0].missing_kind == Kind::kApiKey);
    CHECK_FALSE(keys.values[1].fell_back);
    // The same bucket as any other keyless request from this IP.
    Request keyless;
    auto keys2 = route_keys(config, route, keyless);
    CHECK(keys2.descriptors[0].key_hash == keys.descriptors[0].key_hash);
  }
  SECTION("resolved limit indexes are used") {
    route.limit_indexes = {2, 1};
    route.limits = {"orders_global", "per_ip"};
    auto keys = route_keys(config, route, request);
    REQUIRE(keys.descriptors.size() == 2);
    CHECK(keys.descriptors[0].limit == "orders_global");
    CHECK(keys.descriptors[1].limit == "per_ip");
  }
  SECTION("a route without limits has no descriptors") {
    route.limits.clear();
    CHECK(route_keys(config, route, request).descriptors.empty());
  }
}

TEST_CASE("descriptors of a sliding log: each request's own number names its units",
          "[ratelimit][keys]") {
  sluice::Config config;
  LimitConfig strict = make_limit("strict", {{Kind::kIp, ""}}, 20, 0);
  strict.algorithm = sluice::LimitAlgorithm::kSlidingLog;
  strict.bucket.window_seconds = 60;
  config.limits = {strict};
  sluice::RouteConfig route;
  route.limits = {"strict"};
  Request request;
  std::set<double> numbers;
  for (int i = 0; i < 3; ++i) {
    const auto keys = route_keys(config, route, request);
    REQUIRE(keys.descriptors.size() == 1);
    numbers.insert(keys.descriptors[0].slot);
  }
  CHECK(numbers.size() == 3);  // one bucket, three requests, three names
}

TEST_CASE("identity check: keyed headers and parameters must appear once", "[ratelimit][keys]") {
  ApiKeysConfig api_keys;  // X-API-Key
  const LimitConfig by_key = make_limit("by_key", {{Kind::kApiKey, ""}});
  const LimitConfig by_ip = make_limit("by_ip", {{Kind::kIp, ""}});
  const LimitConfig by_header = make_limit("by_header", {{Kind::kHeader, "X-Tenant"}});
  const LimitConfig by_query = make_limit("by_query", {{Kind::kQuery, "user"}});
  const LimitConfig combo = make_limit("combo", {{Kind::kPath, ""}, {Kind::kHeader, "x-tenant"}});
  using Reason = sluice::KeyRefusal::Reason;
  auto check = [&](std::vector<const LimitConfig*> limits, const Request& request) {
    const RequestView view = request.view();
    return sluice::check_identity(limits, view, api_keys, sluice::identify(view, api_keys));
  };

  Request request;
  request.query = "user=u1&x=1&x=2";
  request.header("X-API-Key", "k1").header("X-Tenant", "t1").repeat("X-Other", "a", 3);
  CHECK_FALSE(check({&by_key, &by_ip, &by_header, &by_query, &combo}, request));

  SECTION("two API key lines") {
    request.repeat("x-api-key", "random", 2);
    auto refusal = check({&by_ip, &by_key}, request);
    REQUIRE(refusal);
    CHECK(refusal->reason == Reason::kDuplicateIdentity);
    CHECK(refusal->message == "more than one X-API-Key header");
    CHECK(refusal->message.find("random") == std::string::npos);
    CHECK_FALSE(check({&by_ip, &by_header, &by_query}, request));  // not keyed on
    CHECK_FALSE(check({}, request));
  }
  SECTION("two API key lines on a limit whose plan the key picks") {
    LimitConfig by_ip_with_plans = make_limit("by_ip_plans", {{Kind::kIp, ""}});
    by_ip_with_plans.plans["pro"] = {500, 100};
    request.repeat("X-API-Key", "random", 2);
    auto refusal = check({&by_ip_with_plans}, request);
    REQUIRE(refusal);
    CHECK(refusal->reason == Reason::kDuplicateIdentity);
    CHECK_FALSE(check({&by_ip}, request));  // no plans: the key does not matter
  }
  SECTION("two lines of a keyed header") {
    request.repeat("X-Tenant", "t-random", 2);
    auto refusal = check({&combo}, request);
    REQUIRE(refusal);
    CHECK(refusal->reason == Reason::kDuplicateIdentity);
    CHECK(refusal->message == "more than one x-tenant header");
    CHECK(check({&by_header}, request));
    CHECK_FALSE(check({&by_key, &by_query}, request));
  }
  SECTION("a keyed query parameter given twice") {
    for (const char* query :
         {"user=a&user=b", "user=a&us%65r=b", "user&user=a", "x=1&user=a&user"}) {
      request.query = query;
      INFO(query);
      auto refusal = check({&by_query}, request);
      REQUIRE(refusal);
      CHECK(refusal->reason == Reason::kDuplicateIdentity);
      CHECK(refusal->message == "query parameter user given more than once");
      CHECK_FALSE(check({&by_key, &by_header}, request));
    }
  }
  SECTION("without a header_count lookup, a present header is one line") {
    RequestView view = request.view();
    view.header_count = nullptr;
    CHECK_FALSE(sluice::check_identity({&by_key, &by_header}, view, api_keys,
                                       sluice::identify(view, api_keys)));
  }
  SECTION("a malformed Authorization matters only where a limit keys on api_key") {
    api_keys.header = "Authorization";
    request.header("Authorization", "Bearer tok extra");
    auto refusal = check({&by_ip, &by_key}, request);
    REQUIRE(refusal);
    CHECK(refusal->reason == Reason::kMalformedAuthorization);
    CHECK(refusal->message == "malformed Authorization header");
    CHECK_FALSE(check({&by_ip, &by_header, &by_query}, request));
    request.header("Authorization", "Basic dXNlcjpwYXNz");
    CHECK_FALSE(check({&by_key}, request));
    // Two lines are a duplicate, whatever their shape.
    request.repeat("Authorization", "Bearer tok", 2);
    refusal = check({&by_key}, request);
    REQUIRE(refusal);
    CHECK(refusal->reason == Reason::kDuplicateIdentity);
    CHECK(refusal->message == "more than one Authorization header");
  }
}

TEST_CASE("descriptors of a refused request: none", "[ratelimit][keys]") {
  sluice::Config config;
  config.limits = {make_limit("by_query", {{Kind::kQuery, "user"}})};
  sluice::RouteConfig route;
  route.name = "r";
  route.limits = {"by_query"};
  Request request;
  request.query = "user=a&user=b";
  auto keys = route_keys(config, route, request);
  REQUIRE(keys.refusal);
  CHECK(keys.refusal->reason == sluice::KeyRefusal::Reason::kDuplicateIdentity);
  CHECK(keys.descriptors.empty());
  CHECK(keys.values.empty());
  request.query = "user=a";
  keys = route_keys(config, route, request);
  CHECK_FALSE(keys.refusal);
  CHECK(keys.descriptors.size() == 1);
}

TEST_CASE("ip key parts: IPv6 clients grouped by the limit's prefix", "[ratelimit][keys][ipv6]") {
  const auto ip = [](const char* text) { return *sluice::parse_ip(text); };
  using sluice::ip_key_address;
  SECTION("the host bits are zeroed") {
    CHECK(ip_key_address(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), 64) == ip("2001:db8:1:2::"));
    CHECK(ip_key_address(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), 48) == ip("2001:db8:1::"));
    CHECK(ip_key_address(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), 128) ==
          ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"));
    CHECK(ip_key_address(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), 1) == ip("::"));
    CHECK(ip_key_address(ip("ffff:db8::1"), 1) == ip("8000::"));
    CHECK(ip_key_address(ip("2001:db8:1:2ff::1"), 57) == ip("2001:db8:1:280::"));
  }
  SECTION("IPv4 clients stay whole, also when written IPv4-mapped") {
    CHECK(ip_key_address(ipv4(192, 0, 2, 77), 64) == ipv4(192, 0, 2, 77));
    CHECK(ip_key_address(ip("::ffff:192.0.2.77"), 1) == ipv4(192, 0, 2, 77));
  }
  SECTION("two addresses of one /64 share a bucket, another /64 does not") {
    const LimitConfig by_ip = make_limit("l", {{Kind::kIp, ""}});
    Request a, b, c;
    a.ip = ip("2001:db8:0:1::1");
    b.ip = ip("2001:db8:0:1:ffff::2");
    c.ip = ip("2001:db8:0:2::1");
    CHECK(hash_input(by_ip, a) == hash_input(by_ip, b));
    CHECK(hash_input(by_ip, a) != hash_input(by_ip, c));
    LimitConfig by_host = by_ip;
    by_host.ipv6_prefix = 128;
    CHECK(hash_input(by_host, a) != hash_input(by_host, b));
  }
  SECTION("a missing key source falls back to the grouped address") {
    const LimitConfig by_key = make_limit("l", {{Kind::kApiKey, ""}});
    Request a, b;
    a.ip = ip("2001:db8:0:1::1");
    b.ip = ip("2001:db8:0:1::2");
    CHECK(hash_input(by_key, a) == hash_input(by_key, b));
    CHECK(sluice::limit_key_value(by_key, a.view(), std::nullopt).fell_back);
  }
}
