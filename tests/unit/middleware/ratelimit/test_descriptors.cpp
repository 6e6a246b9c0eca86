// Rate-limit key extraction: API key, plan, key values and bucket names.
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "middleware/ratelimit/descriptors.hpp"

namespace {

using sluice::ApiKeysConfig;
using sluice::IpAddress;
using sluice::KeySource;
using sluice::LimitConfig;
using sluice::RequestView;
using Kind = sluice::KeySource::Kind;

IpAddress ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  IpAddress ip;
  ip.bytes[10] = 0xff;
  ip.bytes[11] = 0xff;
  ip.bytes[12] = a;
  ip.bytes[13] = b;
  ip.bytes[14] = c;
  ip.bytes[15] = d;
  return ip;
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

// A request with headers held in a map (names compared case-insensitively);
// a header given by repeat() has that many lines, its value being the first.
struct Request {
  std::map<std::string, std::string> headers;  // lower-case names
  std::map<std::string, std::size_t> lines;    // lower-case names; absent: 1 if in headers
  std::string path = "/api/orders/1";
  std::string query;
  IpAddress ip = ipv4(1, 2, 3, 4);
  std::string route = "orders";

  Request& header(std::string name, std::string value) {
    for (char& c : name) c = lower(c);
    headers[name] = std::move(value);
    return *this;
  }
  Request& repeat(std::string name, std::string first_value, std::size_t count) {
    header(name, std::move(first_value));
    for (char& c : name) c = lower(c);
    lines[name] = count;
    return *this;
  }
  RequestView view() const {
    RequestView v;
    v.method = "GET";
    v.path = path;
    v.query = query;
    v.client_ip = ip;
    v.route = route;
    v.header = [this](std::string_view name) -> std::optional<std::string_view> {
      std::string key(name);
      for (char& c : key) c = lower(c);
      auto it = headers.find(key);
      if (it == headers.end()) return std::nullopt;
      return std::string_view(it->second);
    };
    v.header_count = [this](std::string_view name) -> std::size_t {
      std::string key(name);
      for (char& c : key) c = lower(c);
      if (auto it = lines.find(key); it != lines.end()) return it->second;
      return headers.count(key);
    };
    return v;
  }
};

LimitConfig make_limit(std::string name, std::vector<KeySource> key, double capacity = 10,
                       double rate = 1) {
  LimitConfig limit;
  limit.name = std::move(name);
  limit.key = std::move(key);
  limit.bucket = {capacity, rate};
  return limit;
}

ApiKeysConfig with_consumers() {
  ApiKeysConfig config;
  config.consumers = {{"demo-pro-key", "pro"}, {"other-key", "gold"}};
  for (const auto& c : config.consumers) config.plan_by_key[c.key] = c.plan;
  return config;
}

std::string hash_input(const LimitConfig& limit, const Request& request,
                       std::optional<std::string_view> api_key = std::nullopt) {
  return sluice::limit_key_value(limit, request.view(), api_key).hash_input;
}

}  // namespace

TEST_CASE("api key from the configured header", "[ratelimit][keys]") {
  ApiKeysConfig config;  // X-API-Key, no consumers, default plan "free"
  Request request;
  CHECK_FALSE(sluice::extract_api_key(request.view(), config).key);
  CHECK(sluice::extract_api_key(request.view(), config).plan == "free");

  request.header("x-api-key", "  abc123 ");
  auto key = sluice::extract_api_key(request.view(), config);
  REQUIRE(key.key);
  CHECK(*key.key == "abc123");
  CHECK(key.plan == "free");

  request.header("X-API-Key", "");
  CHECK_FALSE(sluice::extract_api_key(request.view(), config).key);

  SECTION("keys longer than 256 bytes count as missing") {
    request.header("X-API-Key", std::string(256, 'k'));
    CHECK(sluice::extract_api_key(request.view(), config).key);
    request.header("X-API-Key", std::string(257, 'k'));
    CHECK_FALSE(sluice::extract_api_key(request.view(), config).key);
  }
  SECTION("a request without a header lookup has no key") {
    RequestView view = request.view();
    view.header = nullptr;
    CHECK_FALSE(sluice::extract_api_key(view, config).key);
  }
}

TEST_CASE("api key from Authorization: Bearer", "[ratelimit][keys]") {
  ApiKeysConfig config;
  config.header = "Authorization";
  Request request;
  auto key_of = [&](std::string value) {
    request.header("Authorization", std::move(value));
    auto key = sluice::extract_api_key(request.view(), config).key;
    return key ? std::optional<std::string>(std::string(*key)) : std::nullopt;
  };
  CHECK(key_of("Bearer tok-1") == std::optional<std::string>("tok-1"));
  CHECK(key_of("bearer tok-2") == std::optional<std::string>("tok-2"));
  CHECK(key_of("BEARER   tok-3  ") == std::optional<std::string>("tok-3"));
  CHECK(key_of("Basic dXNlcjpwYXNz") == std::nullopt);
  CHECK(key_of("Bearer") == std::nullopt);
  CHECK(key_of("Bearer ") == std::nullopt);
  CHECK(key_of("Bearertok") == std::nullopt);
  CHECK(key_of("tok-4") == std::nullopt);
  CHECK(key_of("\tBearer  AZaz09-._~+/== \t") == std::optional<std::string>("AZaz09-._~+/=="));
  config.header = "authorization";  // the header name is matched case-insensitively
  CHECK(key_of("Bearer tok-5") == std::optional<std::string>("tok-5"));
}

TEST_CASE("Authorization: Bearer values not of the form Bearer <token68> are malformed",
          "[ratelimit][keys]") {
  ApiKeysConfig config;
  config.header = "Authorization";
  Request request;
  auto parse = [&](std::string value) {
    request.header("Authorization", std::move(value));
    return sluice::extract_api_key(request.view(), config);
  };
  for (const char* value :
       {"Bearer", "Bearer ", "bearer   ", "Bearer tok,", "Bearer tok extra", "Bearer tok ,",
        "Bearer\ttok", "Bearer \ttok", "Bearer to=k", "Bearer =", "Bearer tok=a", "Bearer t\"k\"",
        "Bearer tok;x", "Bearer t%6Fk", "Bearer t\xc3\xa9"}) {
    auto key = parse(value);
    INFO(value);
    CHECK(key.malformed);
    CHECK_FALSE(key.key);
    CHECK(key.plan == "free");
  }
  // Another scheme, or none, is a missing key, not a malformed one.
  for (const char* value : {"Basic dXNlcjpwYXNz", "Bearertok", "tok", "", "  ", "Token a b,"}) {
    auto key = parse(value);
    INFO(value);
    CHECK_FALSE(key.malformed);
    CHECK_FALSE(key.key);
  }
  // Equivalent spellings give the same key.
  for (const char* value : {"Bearer tok==", "bearer tok==", "BEARER    tok==", " Bearer tok==\t"}) {
    auto key = parse(value);
    INFO(value);
    CHECK_FALSE(key.malformed);
    CHECK(key.key == std::optional<std::string_view>("tok=="));
  }
  SECTION("a token longer than 256 bytes is missing, not malformed") {
    auto key = parse("Bearer " + std::string(257, 'k'));
    CHECK_FALSE(key.malformed);
    CHECK_FALSE(key.key);
    CHECK(parse("Bearer " + std::string(256, 'k')).key);
  }
  SECTION("other headers are never malformed") {
    config.header = "X-API-Key";
    request.header("X-API-Key", "Bearer tok,");
    auto key = sluice::extract_api_key(request.view(), config);
    CHECK_FALSE(key.malformed);
    CHECK(key.key == std::optional<std::string_view>("Bearer tok,"));
  }
}

TEST_CASE("consumers: plans, and unlisted keys count as missing", "[ratelimit][keys]") {
  ApiKeysConfig config = with_consumers();
  Request request;
  request.header("X-API-Key", "demo-pro-key");
  auto key = sluice::extract_api_key(request.view(), config);
  REQUIRE(key.key);
  CHECK(key.plan == "pro");

  request.header("X-API-Key", "random-key");
  key = sluice::extract_api_key(request.view(), config);
  CHECK_FALSE(key.key);
  CHECK(key.plan == "free");

  SECTION("consumers without the lookup map") {
    config.plan_by_key.clear();
    request.header("X-API-Key", "other-key");
    key = sluice::extract_api_key(request.view(), config);
    REQUIRE(key.key);
    CHECK(key.plan == "gold");
  }
}

TEST_CASE("query parameters: form-decoded, first occurrence wins", "[ratelimit][keys]") {
  using sluice::query_param;
  CHECK(query_param("a=1&b=2", "b") == std::optional<std::string>("2"));
  CHECK(query_param("b=first&b=second", "b") == std::optional<std::string>("first"));
  CHECK(query_param("key=a%20b%2Fc", "key") == std::optional<std::string>("a b/c"));
  CHECK(query_param("k%65y=v", "key") == std::optional<std::string>("v"));
  CHECK(query_param("key=100%", "key") == std::optional<std::string>("100%"));
  CHECK(query_param("key=%zz%4", "key") == std::optional<std::string>("%zz%4"));
  CHECK(query_param("key=a+b", "key") == std::optional<std::string>("a b"));
  CHECK(query_param("key=a%2Bb", "key") == std::optional<std::string>("a+b"));
  CHECK(query_param("key=a%2bb+%2B", "key") == std::optional<std::string>("a+b +"));
  CHECK(query_param("my+key=1", "my key") == std::optional<std::string>("1"));
  CHECK(query_param("my%20key=1", "my key") == std::optional<std::string>("1"));
  CHECK(query_param("my+key=1", "my+key") == std::nullopt);
  CHECK(query_param("my%2Bkey=1", "my+key") == std::optional<std::string>("1"));
  CHECK(query_param("key", "key") == std::optional<std::string>(""));
  CHECK(query_param("key=", "key") == std::optional<std::string>(""));
  CHECK(query_param("&&key=x&", "key") == std::optional<std::string>("x"));
  CHECK(query_param("keys=1&akey=2&ke=3&k%65=4", "key") == std::nullopt);
  CHECK(query_param("", "key") == std::nullopt);
  CHECK(query_param("key%=1&key=2", "key") == std::optional<std::string>("2"));
  CHECK(sluice::percent_decode("%41%42%43") == "ABC");
  CHECK(sluice::percent_decode("a+b%2") == "a+b%2");
  CHECK(sluice::form_decode("a+b%2") == "a b%2");
  CHECK(sluice::form_decode("%2B+%25%") == "+ %%");
}

TEST_CASE("query parameters: occurrences counted by decoded name", "[ratelimit][keys]") {
  using sluice::query_param_count;
  CHECK(query_param_count("", "user") == 0);
  CHECK(query_param_count("users=1&auser=2", "user") == 0);
  CHECK(query_param_count("user=a", "user") == 1);
  CHECK(query_param_count("user=a&x=1&x=2", "user") == 1);
  CHECK(query_param_count("user=a&user=b", "user") == 2);
  CHECK(query_param_count("user=a&us%65r=b", "user") == 2);
  CHECK(query_param_count("user&user=", "user") == 2);
  CHECK(query_param_count("user=a&&user=a&%75ser", "user") == 3);
  CHECK(query_param_count("my+id=1&my%20id=2", "my id") == 2);
}

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
    auto keys = sluice::build_route_descriptors(config, route, request.view());
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
    auto keys = sluice::build_route_descriptors(config, route, request.view());
    CHECK(keys.plan == "free");
    CHECK_FALSE(keys.has_api_key);
    CHECK(keys.descriptors[0].capacity == 50);
    CHECK(keys.values[0].fell_back);
    CHECK(keys.values[0].missing_kind == Kind::kApiKey);
    CHECK_FALSE(keys.values[1].fell_back);
    // The same bucket as any other keyless request from this IP.
    Request keyless;
    auto keys2 = sluice::build_route_descriptors(config, route, keyless.view());
    CHECK(keys2.descriptors[0].key_hash == keys.descriptors[0].key_hash);
  }
  SECTION("resolved limit indexes are used") {
    route.limit_indexes = {2, 1};
    route.limits = {"orders_global", "per_ip"};
    auto keys = sluice::build_route_descriptors(config, route, request.view());
    REQUIRE(keys.descriptors.size() == 2);
    CHECK(keys.descriptors[0].limit == "orders_global");
    CHECK(keys.descriptors[1].limit == "per_ip");
  }
  SECTION("a route without limits has no descriptors") {
    route.limits.clear();
    CHECK(sluice::build_route_descriptors(config, route, request.view()).descriptors.empty());
  }
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
    return sluice::check_identity(limits, request.view(), api_keys);
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
    CHECK_FALSE(sluice::check_identity({&by_key, &by_header}, view, api_keys));
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
  auto keys = sluice::build_route_descriptors(config, route, request.view());
  REQUIRE(keys.refusal);
  CHECK(keys.refusal->reason == sluice::KeyRefusal::Reason::kDuplicateIdentity);
  CHECK(keys.descriptors.empty());
  CHECK(keys.values.empty());
  request.query = "user=a";
  keys = sluice::build_route_descriptors(config, route, request.view());
  CHECK_FALSE(keys.refusal);
  CHECK(keys.descriptors.size() == 1);
}
