// Configuration sections: error collection and order, document shape, scalar
// types, addresses, route matches, cost, consumers and the redis section.
#include <catch2/catch.hpp>

#include <string>
#include <unordered_map>
#include <vector>

#include "gateway/config/load.hpp"
#include "support/config_text.hpp"

namespace sluice {
namespace {

using testing::kMinimalTail;
using testing::parse;
using testing::parse_ok;

}  // namespace

TEST_CASE("every error is collected, in file order", "[config]") {
  const auto result = parse(R"(routes:
  - name: a
    match: { path_prefix: "/" }
    upstream: nowhere
    cost: -1
server:
  threads: x
  bogus: 1
upstreams:
  app: { servers: ["127.0.0.1:0"] }
)");
  CHECK_FALSE(result.config);
  CHECK(result.errors == std::vector<std::string>{
                             "test.yaml:4: routes[0].upstream: unknown upstream \"nowhere\"",
                             "test.yaml:5: routes[0].cost: must be greater than 0, got -1",
                             "test.yaml:7: server.threads: expected an integer, got \"x\"",
                             "test.yaml:8: server.bogus: unknown key \"bogus\"",
                             "test.yaml:10: upstreams.app.servers[0]: port must be between 1 and "
                             "65535, got \"127.0.0.1:0\"",
                         });
}

TEST_CASE("a broken section does not cascade into unknown names", "[config]") {
  // upstreams and limits are not mappings: one error each, no "unknown upstream/limit".
  const auto result = parse(R"(
upstreams: [app]
limits: 5
routes:
  - { name: a, match: { path_prefix: "/" }, upstream: app, limits: [per_ip] }
)");
  CHECK(result.errors ==
        std::vector<std::string>{"test.yaml:2: upstreams: expected a mapping, got a list",
                                 "test.yaml:3: limits: expected a mapping, got \"5\""});
  // An upstream with a bad body still exists by name.
  const auto partial = parse(R"(
upstreams:
  app: { servers: [] }
routes:
  - { name: a, match: { path_prefix: "/" }, upstream: app }
)");
  CHECK(partial.errors == std::vector<std::string>{
                              "test.yaml:3: upstreams.app.servers: must list at least one server"});
  // No limits section at all: a reference is unknown.
  const auto no_limits = parse(R"(
upstreams:
  app: { servers: ["127.0.0.1:9000"] }
routes:
  - { name: a, match: { path_prefix: "/" }, upstream: app, limits: [per_ip] }
)");
  CHECK(no_limits.errors ==
        std::vector<std::string>{"test.yaml:5: routes[0].limits[0]: unknown limit \"per_ip\""});
}

TEST_CASE("document shape errors", "[config]") {
  CHECK(parse("just a string\n").errors ==
        std::vector<std::string>{"test.yaml:1: (root): expected a mapping"});
  CHECK(parse("").errors == std::vector<std::string>{"test.yaml:1: (root): expected a mapping"});
  CHECK(parse("upstreams: {}\nroutes: []\n---\nupstreams: {}\n").errors ==
        std::vector<std::string>{"test.yaml:3: (root): expected a single YAML document"});
  CHECK(parse("upstreams: {}\n").errors ==
        std::vector<std::string>{"test.yaml:1: (root): missing required key \"routes\""});
  CHECK(parse("routes: []\nupstreams:\n").errors ==
        std::vector<std::string>{"test.yaml:2: upstreams: expected a mapping, got null"});
  CHECK(parse("upstreams: {}\nroutes: [\n").errors ==
        std::vector<std::string>{"test.yaml:3: syntax error: end of sequence flow not found"});
  CHECK(parse("upstreams: {}\nroutes: []\nserver:\n  listen: \"1.2.3.4:80\"\n   threads: 2\n")
            .errors == std::vector<std::string>{"test.yaml:5: syntax error: end of map not found"});
}

TEST_CASE("scalar types", "[config]") {
  const std::string tail = kMinimalTail;
  SECTION("integers may be quoted; fractions, words and overflow are not integers") {
    CHECK(parse_ok("server: { threads: \"8\" }" + tail)->server.threads == 8);
    CHECK(
        parse("server: { threads: 2.0 }" + tail).errors ==
        std::vector<std::string>{"test.yaml:1: server.threads: expected an integer, got \"2.0\""});
    CHECK(parse("server: { threads: 5000 }" + tail).errors ==
          std::vector<std::string>{"test.yaml:1: server.threads: must be at most 1024, got 5000"});
    CHECK(parse("server: { max_body_bytes: 99999999999999999999 }" + tail).errors ==
          std::vector<std::string>{"test.yaml:1: server.max_body_bytes: must be at most "
                                   "9223372036854775807, got 99999999999999999999"});
    CHECK(parse("server: { idle_timeout_ms: 3000000000 }" + tail).errors ==
          std::vector<std::string>{
              "test.yaml:1: server.idle_timeout_ms: must be at most 2147483647, got 3000000000"});
    CHECK(parse("server: { threads: }" + tail).errors ==
          std::vector<std::string>{"test.yaml:1: server.threads: expected an integer, got null"});
  }
  SECTION("booleans") {
    CHECK_FALSE(parse_ok("log: { access_log: False }" + tail)->log.access_log);
    CHECK(parse_ok("log: { access_log: TRUE }" + tail)->log.access_log);
    CHECK(parse("log: { access_log: on }" + tail).errors ==
          std::vector<std::string>{
              "test.yaml:1: log.access_log: expected true or false, got \"on\""});
  }
  SECTION("numbers") {
    CHECK(
        parse("limits: { l: { key: ip, capacity: nan, refill_per_second: 1 } }" + tail).errors ==
        std::vector<std::string>{"test.yaml:1: limits.l.capacity: expected a number, got \"nan\""});
    const auto c =
        parse_ok("limits: { l: { key: ip, capacity: 1e3, refill_per_second: 0.5 } }" + tail);
    CHECK(c->limits[0].bucket.capacity == 1000);
    CHECK(c->limits[0].bucket.refill_per_second == 0.5);
  }
}

TEST_CASE("addresses", "[config]") {
  const std::string tail = kMinimalTail;
  const auto listen_error = [&](const std::string& address) {
    const auto result = parse("server: { listen: \"" + address + "\" }" + tail);
    return result.errors.empty() ? std::string() : result.errors.front();
  };
  CHECK(listen_error("0.0.0.0:8080").empty());
  CHECK(listen_error("[::]:8080").empty());
  CHECK(listen_error("127.0.0.1:0").empty());  // a listener may ask for any free port
  CHECK(listen_error(":8080") == "test.yaml:1: server.listen: expected host:port, got \":8080\"");
  CHECK(listen_error("8080") == "test.yaml:1: server.listen: expected host:port, got \"8080\"");
  CHECK(listen_error("127.0.0.1:http") ==
        "test.yaml:1: server.listen: port must be between 0 and 65535, got \"127.0.0.1:http\"");
  CHECK(listen_error("[::1]") == "test.yaml:1: server.listen: expected host:port, got \"[::1]\"");
  CHECK(listen_error("[fe80::zz]:80") ==
        "test.yaml:1: server.listen: invalid IPv6 address \"fe80::zz\"");
  CHECK(listen_error("[::1:80") ==
        "test.yaml:1: server.listen: expected host:port, got \"[::1:80\"");
  CHECK(parse_ok("server: { listen: \"[::1]:80\" }" + tail)->server.listen.host == "::1");
  // Admin and data plane may share a port on different addresses.
  CHECK(
      parse("server: { listen: \"127.0.0.1:8080\" }\nadmin: { listen: \"127.0.0.2:8080\" }" + tail)
          .errors.empty());
  CHECK(parse("admin: { listen: \"127.0.0.1:8080\" }" + tail).errors ==
        std::vector<std::string>{
            "test.yaml:1: admin.listen: conflicts with server.listen \"0.0.0.0:8080\""});
}

TEST_CASE("routes: match details", "[config]") {
  const std::string head = R"(
upstreams:
  app: { servers: ["127.0.0.1:9000"] }
routes:
)";
  SECTION("methods are upper-cased and de-duplicated") {
    const auto c = parse_ok(
        head +
        "  - { name: a, match: { path_prefix: /, methods: [get, GET, Post] }, upstream: app }");
    CHECK(c->routes[0].match.methods == std::vector<std::string>{"GET", "POST"});
  }
  SECTION("host is lower-cased, a trailing dot dropped, IPv6 literals allowed") {
    auto c = parse_ok(
        head + "  - { name: a, match: { path_prefix: /, host: Api.Example.COM. }, upstream: app }");
    CHECK(c->routes[0].match.host == "api.example.com");
    c = parse_ok(head +
                 "  - { name: a, match: { path_prefix: /, host: \"[::1]\" }, upstream: app }");
    CHECK(c->routes[0].match.host == "[::1]");
    CHECK(parse(head + "  - { name: a, match: { path_prefix: /, host: \"a b\" }, upstream: app }")
              .errors ==
          std::vector<std::string>{"test.yaml:5: routes[0].match.host: invalid host \"a b\""});
  }
  SECTION("a regex need not start with a slash") {
    const auto c =
        parse_ok(head + "  - { name: a, match: { path_regex: \".*\\\\.png\" }, upstream: app }");
    CHECK(c->routes[0].match.path == ".*\\.png");
  }
  SECTION("back-references are rejected: RE2 runs in linear time") {
    CHECK(parse(head + "  - { name: a, match: { path_regex: '/(a)\\1' }, upstream: app }").errors ==
          std::vector<std::string>{"test.yaml:5: routes[0].match.path_regex: invalid regular "
                                   "expression: invalid escape sequence: \\1 in \"/(a)\\\\1\""});
  }
  SECTION("strip_prefix: false is fine on any path kind") {
    CHECK(parse(head +
                "  - { name: a, match: { path_exact: /x }, upstream: app, strip_prefix: false }")
              .errors.empty());
  }
  SECTION("a missing match mapping") {
    CHECK(parse(head + "  - { name: a, upstream: app }").errors ==
          std::vector<std::string>{"test.yaml:5: routes[0]: missing required key \"match\""});
  }
  SECTION("route items must be mappings") {
    CHECK(parse(head + "  - a").errors ==
          std::vector<std::string>{"test.yaml:5: routes[0]: expected a mapping, got \"a\""});
  }
}

TEST_CASE("cost may not exceed a limit's capacity", "[config]") {
  const std::string head = R"(
upstreams:
  app: { servers: ["127.0.0.1:9000"] }
limits:
  small: { key: ip, capacity: 2, refill_per_second: 1 }
routes:
)";
  CHECK(parse(head + "  - { name: a, match: { path_prefix: / }, upstream: app, limits: [small], "
                     "cost: 2 }")
            .errors.empty());
  CHECK(
      parse(head + "  - { name: a, match: { path_prefix: / }, upstream: app, limits: [small], "
                   "cost: 2.5 }")
          .errors ==
      std::vector<std::string>{
          "test.yaml:7: routes[0].cost: cost 2.5 is more than the capacity 2 of limit \"small\""});
}

TEST_CASE("api_keys consumers", "[config]") {
  const std::string tail = kMinimalTail;
  SECTION("consumer_index is built from consumers") {
    const auto c = parse_ok(R"(
api_keys:
  consumers:
    - { key: k1, plan: pro }
    - { key: k2, plan: free }
)" + tail);
    CHECK(c->api_keys.consumer_index == decltype(c->api_keys.consumer_index){{"k1", 0}, {"k2", 1}});
    CHECK(c->api_keys.consumers[1].plan == "free");
  }
  SECTION("a key is never echoed in a message") {
    const std::string long_key(257, 'k');
    const auto result = parse("api_keys:\n  consumers:\n    - { key: " + long_key +
                              ", plan: pro }\n    - { key: \"has space\", plan: pro }" + tail);
    CHECK(result.errors == std::vector<std::string>{
                               "test.yaml:3: api_keys.consumers[0].key: longer than 256 bytes",
                               "test.yaml:4: api_keys.consumers[1].key: must not contain spaces "
                               "or control characters"});
  }
}

TEST_CASE("redis section", "[config]") {
  const std::string tail = kMinimalTail;
  SECTION("tls_server_name defaults to the url host") {
    const auto c = parse_ok("redis: { url: \"rediss://cache.internal\" }" + tail);
    CHECK(c->redis.tls);
    CHECK(c->redis.port == 6379);
    CHECK(c->redis.tls_server_name == "cache.internal");
  }
  SECTION("a url error never shows the url, which may carry a password") {
    const auto result = parse("redis: { url: \"redis://:hunter2@host:99999\" }" + tail);
    REQUIRE(result.errors.size() == 1);
    CHECK(result.errors[0].find("hunter2") == std::string::npos);
  }
  SECTION("a client key without its certificate") {
    CHECK(
        parse("redis: { url: \"rediss://h\", tls_key_file: k.pem }" + tail).errors ==
        std::vector<std::string>{"test.yaml:1: redis.tls_key_file: requires redis.tls_cert_file"});
  }
}

TEST_CASE("default-constructed config trusts 127.0.0.1 only", "[config]") {
  const ServerConfig server;
  REQUIRE(server.trusted_proxies.size() == 1);
  CHECK(server.trusted_proxies[0].to_string() == "127.0.0.1/32");
}


TEST_CASE("protocol h2 without a tls section verifies against the system's CAs", "[config]") {
  const auto parsed = parse_ok(R"(upstreams:
  greeter:
    servers: ["greeter.internal:443"]
    protocol: h2
  plain:
    servers: ["127.0.0.1:50051"]
    protocol: h2c
routes: []
)");
  const Config& c = *parsed;
  REQUIRE(c.upstreams.size() == 2);
  CHECK(c.upstreams[0].protocol == UpstreamProtocol::kH2);
  REQUIRE(c.upstreams[0].tls);
  CHECK(c.upstreams[0].tls->config().ca_file.empty());
  CHECK(c.upstreams[1].protocol == UpstreamProtocol::kH2c);
  CHECK_FALSE(c.upstreams[1].tls);
  CHECK(c.upstreams[1].http2());
}

}  // namespace sluice
