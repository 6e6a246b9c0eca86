// Configuration checks beyond single values: the method fall-through warning,
// plan names, merge keys, secrets in messages, --print-endpoints' JSON, and the
// list of accepted keys against docs/configuration.md.
#include <re2/re2.h>
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gateway/config/checks.hpp"
#include "gateway/config/keys.hpp"
#include "gateway/config/load.hpp"
#include "gateway/endpoints.hpp"
#include "support/config_text.hpp"

namespace sluice {
namespace {

using testing::kFixtures;

const char* const kChecksHead = R"(upstreams:
  app: { servers: ["127.0.0.1:9000"] }
limits:
  per_ip: { key: ip, capacity: 10, refill_per_second: 1 }
routes:
)";

// The warnings of a config made of kChecksHead and `routes` (one route per line).
std::vector<std::string> warnings_of(const std::string& routes) {
  const auto result = testing::parse_no_env(kChecksHead + routes);
  INFO((result.errors.empty() ? std::string() : result.errors.front()));
  REQUIRE(result.config);
  return result.warnings;
}

std::string bypass_warning(int line, int limited, int later, const std::string& name) {
  const std::string later_path = "routes[" + std::to_string(later) + "]";
  return "test.yaml:" + std::to_string(line) + ": routes[" + std::to_string(limited) +
         "].match.methods: requests with a method not listed here (TRACE, PURGE, a lower-case "
         "\"get\"...) fall through to " +
         later_path + " (\"" + name +
         "\"), which matches the same paths with no limits, so they bypass the limits of this "
         "route; give " +
         later_path + " limits, or drop methods here to limit every method";
}

RouteMatch prefix(std::string path, std::string host = "") {
  RouteMatch m;
  m.path_kind = RouteMatch::PathKind::kPrefix;
  m.path = std::move(path);
  m.host = std::move(host);
  return m;
}

RouteMatch exact(std::string path) {
  RouteMatch m = prefix(std::move(path));
  m.path_kind = RouteMatch::PathKind::kExact;
  return m;
}

RouteMatch regex(std::string pattern) {
  RouteMatch m = prefix(pattern);
  m.path_kind = RouteMatch::PathKind::kRegex;
  m.regex = std::make_shared<const re2::RE2>(pattern);
  return m;
}

}  // namespace

TEST_CASE("checks: an audit stream outside redis.key_prefix is warned about", "[config]") {
  auto warnings = [](const std::string& stream) {
    const auto result = testing::parse_no_env(std::string(kChecksHead) +
                                              "  - { name: r, match: { path_prefix: / }, "
                                              "upstream: app, limits: [per_ip] }\n"
                                              "redis: { key_prefix: \"acme:\" }\n"
                                              "audit: { redis_stream: \"" +
                                              stream + "\" }\n");
    INFO((result.errors.empty() ? std::string() : result.errors.front()));
    REQUIRE(result.config);
    return result.warnings;
  };
  CHECK(warnings("acme:denials").empty());
  CHECK(warnings("audit:denials") ==
        std::vector<std::string>{
            "test.yaml:8: audit.redis_stream: the stream \"audit:denials\" is outside "
            "redis.key_prefix \"acme:\", where every other key of Sluice lies: a Redis user "
            "limited to the prefix cannot append to it; name it under the prefix "
            "(\"acme:denials\")"});
}

TEST_CASE("route_match_covers", "[config][checks]") {
  // outer covers inner: every path and host inner matches, outer matches.
  CHECK(route_match_covers(prefix("/"), prefix("/api/")));
  CHECK(route_match_covers(prefix("/api"), prefix("/api/")));
  CHECK(route_match_covers(prefix("/api/"), prefix("/api/")));
  CHECK(route_match_covers(prefix("/api/"), exact("/api/x")));
  CHECK(route_match_covers(exact("/health"), exact("/health")));
  CHECK(route_match_covers(prefix("/"), regex("/items/[0-9]+")));
  CHECK(route_match_covers(regex("/.*"), prefix("/api/")));
  CHECK(route_match_covers(regex(".*"), exact("/x")));
  CHECK(route_match_covers(regex("/items/[0-9]+"), exact("/items/42")));
  CHECK(route_match_covers(regex("/items/[0-9]+"), regex("/items/[0-9]+")));
  CHECK(route_match_covers(prefix("/"), prefix("/api/", "api.example.com")));

  CHECK_FALSE(route_match_covers(prefix("/api/"), prefix("/api")));      // /apix is not under it
  CHECK_FALSE(route_match_covers(prefix("/api/v1/"), prefix("/api/")));  // narrower
  CHECK_FALSE(route_match_covers(prefix("/other/"), prefix("/api/")));
  CHECK_FALSE(route_match_covers(exact("/api/"), prefix("/api/")));
  CHECK_FALSE(route_match_covers(exact("/a"), exact("/b")));
  CHECK_FALSE(route_match_covers(prefix("/api/"), regex("/api/.*")));  // not decided: no
  CHECK_FALSE(route_match_covers(regex("/items/[0-9]+"), exact("/items/x")));
  CHECK_FALSE(route_match_covers(regex("/api/.*"), prefix("/api/")));
  // Hosts: an outer host covers only the same host.
  CHECK_FALSE(route_match_covers(prefix("/", "a.example.com"), prefix("/api/")));
  CHECK_FALSE(route_match_covers(prefix("/", "a.example.com"), prefix("/", "b.example.com")));
  CHECK(route_match_covers(prefix("/", "a.example.com"), prefix("/x", "a.example.com")));
}

TEST_CASE("warning: a limited route with methods falls through to an unlimited one",
          "[config][checks]") {
  SECTION("the old demo: api with methods, then an unlimited catch-all") {
    CHECK(warnings_of(R"(  - name: api
    match: { path_prefix: /api/, methods: [GET, POST] }
    upstream: app
    limits: [per_ip]
  - { name: default, match: { path_prefix: / }, upstream: app, limits: [] }
)") == std::vector<std::string>{bypass_warning(7, 0, 1, "default")});
  }
  SECTION("same path, a later exact route, a regex catch-all, a covering host") {
    CHECK(warnings_of("  - { name: a, match: { path_prefix: /api/, methods: [GET] }, upstream: "
                      "app, limits: [per_ip] }\n"
                      "  - { name: b, match: { path_prefix: /api/ }, upstream: app }\n") ==
          std::vector<std::string>{bypass_warning(6, 0, 1, "b")});
    CHECK(warnings_of("  - { name: a, match: { path_exact: /login, methods: [POST] }, upstream: "
                      "app, limits: [per_ip] }\n"
                      "  - { name: b, match: { path_regex: \"/.*\" }, upstream: app }\n") ==
          std::vector<std::string>{bypass_warning(6, 0, 1, "b")});
    CHECK(warnings_of("  - { name: a, match: { path_prefix: /api/, methods: [GET], host: "
                      "api.example.com }, upstream: app, limits: [per_ip] }\n"
                      "  - { name: b, match: { path_prefix: / }, upstream: app }\n") ==
          std::vector<std::string>{bypass_warning(6, 0, 1, "b")});
  }
  SECTION("a route in between that is not the first any-method cover does not hide it") {
    CHECK(warnings_of("  - { name: a, match: { path_prefix: /api/, methods: [GET] }, upstream: "
                      "app, limits: [per_ip] }\n"
                      "  - { name: other, match: { path_prefix: /other/ }, upstream: app }\n"
                      "  - { name: opts, match: { path_prefix: /api/, methods: [OPTIONS] }, "
                      "upstream: app }\n"
                      "  - { name: c, match: { path_prefix: / }, upstream: app }\n") ==
          std::vector<std::string>{bypass_warning(6, 0, 3, "c")});
  }
  SECTION("no warning") {
    // The later catch-all is limited (the new demo).
    CHECK(warnings_of("  - { name: a, match: { path_prefix: /api/, methods: [GET] }, upstream: "
                      "app, limits: [per_ip] }\n"
                      "  - { name: b, match: { path_prefix: / }, upstream: app, limits: [per_ip] "
                      "}\n")
              .empty());
    // A limited any-method route covers first; the unlimited one after it is never reached.
    CHECK(warnings_of("  - { name: a, match: { path_prefix: /api/, methods: [GET] }, upstream: "
                      "app, limits: [per_ip] }\n"
                      "  - { name: b, match: { path_prefix: /api }, upstream: app, limits: "
                      "[per_ip] }\n"
                      "  - { name: c, match: { path_prefix: / }, upstream: app }\n")
              .empty());
    // No methods on the limited route: every method is limited.
    CHECK(warnings_of("  - { name: a, match: { path_prefix: /api/ }, upstream: app, limits: "
                      "[per_ip] }\n"
                      "  - { name: b, match: { path_prefix: / }, upstream: app }\n")
              .empty());
    // The unlimited route lists its methods: those were routed there on purpose.
    CHECK(warnings_of("  - { name: a, match: { path_prefix: /api/, methods: [GET] }, upstream: "
                      "app, limits: [per_ip] }\n"
                      "  - { name: b, match: { path_prefix: /, methods: [OPTIONS] }, upstream: "
                      "app }\n")
              .empty());
    // Not the same paths: a narrower prefix, a sibling, another host, an unlimited route before.
    CHECK(warnings_of("  - { name: a, match: { path_prefix: /api/, methods: [GET] }, upstream: "
                      "app, limits: [per_ip] }\n"
                      "  - { name: b, match: { path_prefix: /api/v1/ }, upstream: app }\n"
                      "  - { name: c, match: { path_prefix: /apx }, upstream: app }\n"
                      "  - { name: d, match: { path_prefix: /, host: other.example.com }, "
                      "upstream: app }\n")
              .empty());
    CHECK(warnings_of("  - { name: b, match: { path_prefix: / }, upstream: app }\n"
                      "  - { name: a, match: { path_prefix: /api/, methods: [GET] }, upstream: "
                      "app, limits: [per_ip] }\n")
              .empty());
  }
}

TEST_CASE("plan overrides must name a plan of api_keys", "[config][checks]") {
  const std::string tail = R"(
upstreams: { app: { servers: ["127.0.0.1:9000"] } }
routes: []
)";
  const std::string limits = R"(limits:
  per_key:
    key: api_key
    capacity: 5
    refill_per_second: 1
    plans:
      pro: { capacity: 50 }
)";
  SECTION("the default plan and consumers' plans are known") {
    CHECK(testing::parse_ok_no_env("api_keys: { consumers: [{ key: k, plan: pro }] }\n" + limits +
                                   tail));
    CHECK(testing::parse_ok_no_env("api_keys: { default_plan: pro }\n" + limits + tail));
  }
  SECTION("without api_keys only the default plan \"free\" is known") {
    CHECK(testing::parse_no_env(limits + tail).errors ==
          std::vector<std::string>{"test.yaml:7: limits.per_key.plans.pro: unknown plan \"pro\": "
                                   "not api_keys.default_plan nor the plan of a consumer (known: "
                                   "free)"});
  }
  SECTION("a broken api_keys section does not cascade into unknown plans") {
    CHECK(testing::parse_no_env("api_keys: [pro]\n" + limits + tail).errors ==
          std::vector<std::string>{"test.yaml:1: api_keys: expected a mapping, got a list"});
  }
}

TEST_CASE("merge keys: one message, no cascade", "[config][checks]") {
  const auto result = testing::parse_no_env(R"(upstreams:
  app: { servers: ["127.0.0.1:9000"] }
routes:
  - name: a
    <<: { match: { path_prefix: / }, upstream: app }
  - { name: b, match: { path_prefix: /b }, upstream: app, "<<": 1 }
)");
  CHECK(result.errors ==
        std::vector<std::string>{
            "test.yaml:5: routes[0]: YAML merge keys (\"<<\") are not supported: write the keys "
            "out (an alias of a whole value, \"key: *anchor\", works)",
            // A quoted "<<" is an ordinary (unknown) key.
            "test.yaml:6: routes[1].<<: unknown key \"<<\""});
  // An alias of a whole value works.
  CHECK(testing::parse_ok_no_env(R"(upstreams:
  app: { servers: &servers ["127.0.0.1:9000"] }
  app2: { servers: *servers }
routes: []
)")
            ->upstreams[1]
            .servers[0]
            .to_string() == "127.0.0.1:9000");
}

TEST_CASE("tab indentation is named, wherever yaml-cpp trips on it", "[config][checks]") {
  CHECK(testing::parse_no_env("server:\n\tlisten: \"127.0.0.1:1\"\nupstreams: {}\nroutes: []\n")
            .errors ==
        std::vector<std::string>{
            "test.yaml:2: syntax error: a tab in the indentation (YAML indents with spaces only)"});
  CHECK(testing::parse_no_env(
            "server:\n  threads: 1\n \t listen: \"127.0.0.1:1\"\nupstreams: {}\nroutes: []\n")
            .errors ==
        std::vector<std::string>{
            "test.yaml:3: syntax error: a tab in the indentation (YAML indents with spaces only)"});
  // A tab after the indentation is not in it.
  CHECK(testing::parse_ok_no_env("server:\n  threads:\t2\nupstreams: {}\nroutes: []\n")
            ->server.threads == 2);
}

TEST_CASE("API keys never appear in messages", "[config][checks]") {
  const auto result = testing::parse_no_env(R"(api_keys:
  consumers:
    - secret-key-1
    - { secret-key-2: pro }
    - { key: [secret-key-3], plan: pro }
upstreams: {}
routes: []
)");
  CHECK(result.errors == std::vector<std::string>{
                             "test.yaml:3: api_keys.consumers[0]: expected a mapping",
                             "test.yaml:4: api_keys.consumers[1]: unknown key (not shown: this "
                             "section holds API keys)",
                             "test.yaml:4: api_keys.consumers[1]: missing required key \"key\"",
                             "test.yaml:4: api_keys.consumers[1]: missing required key \"plan\"",
                             "test.yaml:5: api_keys.consumers[2].key: expected a string, got a "
                             "list"});
  for (const auto& e : result.errors) CHECK(e.find("secret-key") == std::string::npos);
}

TEST_CASE("a bad redis url is shown without its password", "[config][checks]") {
  const auto url_error = [](const std::string& url) {
    const auto result =
        testing::parse_no_env("redis: { url: \"" + url + "\" }\nupstreams: {}\nroutes: []\n");
    REQUIRE(result.errors.size() == 1);
    return result.errors[0].substr(result.errors[0].find(", got ") + 6);
  };
  CHECK(url_error("redis://alice:hunter2@h:0") == "\"redis://alice:***@h:0\"");
  CHECK(url_error("redis://hunter2@h:0") == "\"redis://***@h:0\"");
  CHECK(url_error("redis://:pa?ss@h:0") == "\"redis://:***@h:0\"");
  CHECK(url_error("redis://:pa/ss@word@h:0") == "\"redis://:***@h:0\"");
  CHECK(url_error("redis://h:1/0?password=hunter2") == "\"redis://h:1/0?***\"");
  CHECK(url_error("tcp://:hunter2@h") == "\"tcp://:***@h\"");
  CHECK(url_error(":hunter2@h:6379") == "\":***@h:6379\"");
}

TEST_CASE("messages escape and cut what they echo", "[config][checks]") {
  const std::string tail = "\nupstreams: {}\nroutes: []\n";
  CHECK(testing::parse_no_env("log: { level: \"a\\tb\\\"c\" }" + tail).errors ==
        std::vector<std::string>{"test.yaml:1: log.level: unknown log level \"a\\tb\\\"c\" "
                                 "(expected trace, debug, info, warn or error)"});
  const auto long_value =
      testing::parse_no_env("server: { threads: " + std::string(200, '9') + "x }" + tail);
  REQUIRE(long_value.errors.size() == 1);
  CHECK(long_value.errors[0] == "test.yaml:1: server.threads: expected an integer, got \"" +
                                    std::string(120, '9') + "...\"");
}

TEST_CASE("endpoints_json", "[config][checks]") {
  SECTION("the demo config") {
    const auto result = sluice::testing::load_shipped_config("sluice.yaml");
    REQUIRE(result.config);
    CHECK(endpoints_json(*result.config) ==
          R"({"listen":"127.0.0.1:8080","admin_listen":"127.0.0.1:9901",)"
          R"("redis":{"host":"127.0.0.1","port":6379,"tls":false},)"
          R"("upstreams":{"demo":[{"host":"127.0.0.1","port":9000}]}})");
  }
  SECTION("no credentials; names as configured; null redis when nothing is limited") {
    const auto c = testing::parse_ok_no_env(R"(server: { listen: "[::1]:0" }
redis: { url: "rediss://alice:hunter2@cache.internal:6390/3" }
upstreams:
  b: { servers: ["b.internal:80", "[::1]:81"] }
  a: { servers: ["10.0.0.1:9000"] }
routes: []
)");
    const auto json = endpoints_json(*c);
    CHECK(json.find("hunter2") == std::string::npos);
    CHECK(json.find("alice") == std::string::npos);
    const auto doc = nlohmann::json::parse(json);
    CHECK(doc["listen"] == "[::1]:0");
    CHECK(doc["admin_listen"] == "127.0.0.1:9901");
    CHECK(doc["redis"].is_null());
    CHECK(doc["upstreams"]["b"] ==
          nlohmann::json::parse(R"([{"host":"b.internal","port":80},{"host":"::1","port":81}])"));
    CHECK(doc["upstreams"]["a"][0]["port"] == 9000);
  }
  SECTION("redis as parsed from the url when a route is limited") {
    const auto c =
        testing::parse_ok_no_env(R"(redis: { url: "rediss://alice:hunter2@cache.internal:6390/3" }
upstreams: { app: { servers: ["127.0.0.1:9000"] } }
limits: { per_ip: { key: ip, capacity: 1, refill_per_second: 1 } }
routes: [{ name: a, match: { path_prefix: / }, upstream: app, limits: [per_ip] }]
)");
    CHECK(nlohmann::json::parse(endpoints_json(*c))["redis"] ==
          nlohmann::json::parse(R"({"host":"cache.internal","port":6390,"tls":true})"));
  }
}

TEST_CASE("every key the parser accepts is documented", "[config][docs]") {
  const auto keys = config_key_paths();
  // A sample, so that the list is known to be the parser's tables.
  for (const char* key : {"server.listen", "redis.circuit_breaker.open_ms",
                          "upstreams.NAME.servers", "api_keys.consumers[].plan",
                          "limits.NAME.plans.PLAN.refill_per_second", "routes[].match.methods"}) {
    CHECK(std::find(keys.begin(), keys.end(), key) != keys.end());
  }
  std::ifstream in(kFixtures + "/../../docs/configuration.md");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  const std::string docs = text.str();
  for (const auto& key : keys) {
    INFO("docs/configuration.md does not document `" << key << "`");
    CHECK(docs.find("`" + key + "`") != std::string::npos);
  }
}

TEST_CASE("warning: a header with \"_\" that the underscore policy hides from the limiter",
          "[config]") {
  auto config_with = [](const std::string& policy, const std::string& header) {
    return "server: { headers_with_underscores: " + policy +
           " }\n"
           "upstreams:\n"
           "  app: { servers: [\"127.0.0.1:9000\"] }\n"
           "api_keys: { header: " +
           header +
           " }\n"
           "limits:\n"
           "  per_tenant: { key: header:X_Tenant, capacity: 10, refill_per_second: 1 }\n"
           "  per_ip: { key: ip, capacity: 10, refill_per_second: 1 }\n"
           "routes:\n"
           "  - { name: r, match: { path_prefix: / }, upstream: app, limits: [per_tenant, "
           "per_ip] }\n";
  };
  const auto dropped = testing::parse_no_env(config_with("drop", "X_Api_Key"));
  REQUIRE(dropped.config);
  REQUIRE(dropped.warnings.size() == 2);
  CHECK(dropped.warnings[0] ==
        "test.yaml:6: limits.per_tenant.key: header \"X_Tenant\" has \"_\" in its name, and "
        "server.headers_with_underscores is drop: the header is removed before the limiter "
        "sees it; rename it or set headers_with_underscores: allow");
  CHECK(dropped.warnings[1].starts_with("test.yaml:4: api_keys.header: header \"X_Api_Key\""));

  const auto rejected = testing::parse_no_env(config_with("reject", "X-Api-Key"));
  REQUIRE(rejected.warnings.size() == 1);
  CHECK(rejected.warnings[0].find("reject: requests with it get 400") != std::string::npos);

  CHECK(testing::parse_no_env(config_with("allow", "X_Api_Key")).warnings.empty());
}

}  // namespace sluice
