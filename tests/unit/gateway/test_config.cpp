// Configuration parsing and validation: one bad fixture per failure mode with
// its exact messages, and the parsed values of the good fixtures.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "gateway/config.hpp"

namespace sluice {
namespace {

const std::string kFixtures = SLUICE_FIXTURES_DIR;

struct BadFixture {
  const char* file;
  std::vector<std::string> errors;  // "LINE: key.path: message", the file name is prepended
};

// Every file under tests/fixtures/bad/ and the exact errors it must produce.
const std::vector<BadFixture> kBadFixtures = {
    {"syntax_error.yaml", {"4: syntax error: end of sequence flow not found"}},
    {"empty_file.yaml", {"1: (root): expected a mapping"}},
    {"unknown_key_top.yaml", {"1: listen: unknown key \"listen\""}},
    {"unknown_key_nested.yaml", {"3: server.max_headers_bytes: unknown key \"max_headers_bytes\""}},
    {"duplicate_key.yaml", {"3: server.threads: duplicate key \"threads\" (first at line 2)"}},
    {"missing_routes.yaml", {"1: (root): missing required key \"routes\""}},
    {"missing_route_upstream.yaml", {"5: routes[0]: missing required key \"upstream\""}},
    {"missing_limit_key.yaml",
     {"3: limits.per_ip: missing required key \"key\"",
      "3: limits.per_ip: missing required key \"refill_per_second\""}},
    {"expected_integer.yaml",
     {"2: server.threads: expected an integer, got \"many\"",
      "3: server.max_body_bytes: expected an integer, got \"1.5\""}},
    {"expected_mapping.yaml",
     {"1: server: expected a mapping, got \"0.0.0.0:8080\"",
      "3: redis.circuit_breaker: expected a mapping, got \"5\"",
      "4: upstreams: expected a mapping, got a list"}},
    {"expected_list.yaml",
     {"3: upstreams.app.servers: expected a list, got \"127.0.0.1:9000\"",
      "4: routes: expected a list, got a mapping"}},
    {"expected_string.yaml",
     {"2: log.level: expected a string, got a list",
      "4: redis.key_prefix: expected a string, got null"}},
    {"expected_bool.yaml",
     {"2: log.access_log: expected true or false, got \"yes\"",
      "10: routes[0].strip_prefix: expected true or false, got \"1\""}},
    {"expected_number.yaml",
     {"5: limits.per_ip.capacity: expected a number, got \"lots\"",
      "6: limits.per_ip.refill_per_second: expected a number, got \".inf\""}},
    {"zero_timeout.yaml",
     {"2: server.header_timeout_ms: must be greater than 0, got 0",
      "4: redis.timeout_ms: must be greater than 0, got 0",
      "8: upstreams.app.response_timeout_ms: must be greater than 0, got 0"}},
    {"negative_size.yaml",
     {"2: server.threads: must not be negative, got -1",
      "3: server.max_header_bytes: must be greater than 0, got 0",
      "4: server.max_body_bytes: must be greater than 0, got -10",
      "8: upstreams.app.max_idle_connections: must not be negative, got -1"}},
    {"bad_listen_address.yaml",
     {"2: server.listen: host must be an IP address, not a name, got \"localhost:8080\"",
      "4: admin.listen: port must be between 0 and 65535, got \"127.0.0.1:70000\""}},
    {"admin_listen_conflict.yaml",
     {"4: admin.listen: conflicts with server.listen \"0.0.0.0:8080\""}},
    {"bad_upstream_server.yaml",
     {"4: upstreams.orders.servers[0]: expected host:port, got \"127.0.0.1\"",
      "5: upstreams.orders.servers[1]: IPv6 addresses need brackets, e.g. \"[::1]:8080\", got "
      "\"::1:9001\"",
      "6: upstreams.orders.servers[2]: port must be between 1 and 65535, got "
      "\"orders.internal:0\"",
      "7: upstreams.orders.servers[3]: invalid host \"bad host\"",
      "8: upstreams.orders.servers[4]: invalid IPv4 address \"300.1.1.1\""}},
    {"empty_servers.yaml",
     {"3: upstreams.orders.servers: must list at least one server",
      "4: upstreams.users: missing required key \"servers\""}},
    {"bad_name.yaml",
     {"2: upstreams.orders v2: invalid name \"orders v2\": use letters, digits, \"_\", \"-\" and "
      "\".\"",
      "5: routes[0].name: invalid name \"all/everything\": use letters, digits, \"_\", \"-\" and "
      "\".\""}},
    {"bad_log_level.yaml",
     {"2: log.level: unknown log level \"verbose\" (expected trace, debug, info, warn or error)"}},
    {"bad_cidr.yaml",
     {"4: server.trusted_proxies[1]: invalid CIDR \"10.0.0.0/33\"",
      "5: server.trusted_proxies[2]: invalid CIDR \"proxy.internal\"",
      "6: server.trusted_proxies[3]: invalid CIDR \"::1/129\""}},
    {"bad_redis_url.yaml",
     {"2: redis.url: invalid url: must start with redis:// or rediss://, got "
      "\"http://127.0.0.1:6379\""}},
    // The password is never shown.
    {"bad_redis_url_port.yaml",
     {"2: redis.url: invalid url: port must be between 1 and 65535, got "
      "\"redis://:***@127.0.0.1:0/0\""}},
    {"redis_tls_without_rediss.yaml",
     {"3: redis.tls_ca_file: only valid with a rediss:// url",
      "4: redis.tls_cert_file: only valid with a rediss:// url",
      "4: redis.tls_cert_file: requires redis.tls_key_file"}},
    {"bad_api_key_header.yaml",
     {"3: api_keys.header: invalid header name \"X API Key\"",
      "4: api_keys.default_plan: must not be empty"}},
    {"duplicate_consumer_key.yaml",
     {"6: api_keys.consumers[2].key: duplicate consumer key (first at line 4)",
      "7: api_keys.consumers[3]: missing required key \"key\""}},
    {"bad_key_source.yaml",
     {"4: limits.per_user.key: unknown key source \"user\" (expected api_key, ip, path, route, "
      "global, header:NAME or query:NAME)",
      "8: limits.per_header.key: invalid header name \"\" in \"header:\"",
      "12: limits.composite.key[1]: missing parameter name in \"query:\"",
      "16: limits.empty.key: must list at least one key source"}},
    {"bad_plans.yaml",
     {"8: limits.per_key.plans.pro: expected a mapping, got \"500\"",
      "9: limits.per_key.plans.team.burst: unknown key \"burst\"",
      "14: limits.per_ip.plans: expected a mapping, got a list"}},
    {"unknown_plan.yaml",
     {"13: limits.per_key.plans.por: unknown plan \"por\": not api_keys.default_plan nor the "
      "plan of a consumer (known: free, pro)"}},
    {"bad_capacity.yaml",
     {"5: limits.per_ip.capacity: must be greater than 0, got 0",
      "6: limits.per_ip.refill_per_second: must be greater than 0, got -0.5"}},
    {"bad_cost.yaml", {"8: routes[0].cost: must be greater than 0, got 0"}},
    {"cost_exceeds_capacity.yaml",
     {"16: routes[0].cost: cost 5 is more than the capacity 2 of limit \"per_key\" plan "
      "\"trial\""}},
    {"bad_on_redis_failure.yaml",
     {"8: routes[0].on_redis_failure: expected open or closed, got \"deny\""}},
    {"duplicate_route_name.yaml",
     {"8: routes[1].name: duplicate route name \"api\" (first at line 5)"}},
    {"match_no_path.yaml",
     {"6: routes[0].match: missing one of path_prefix, path_exact or path_regex"}},
    {"match_two_paths.yaml",
     {"8: routes[0].match: only one of path_prefix, path_exact or path_regex is allowed"}},
    {"path_not_normalized.yaml",
     {"6: routes[0].match.path_prefix: requests are matched on their normalized path: write "
      "\"/api/v1/\" instead of \"/api//v1/\"",
      "9: routes[1].match.path_exact: requests are matched on their normalized path: write "
      "\"/api\" instead of \"/%61pi\"",
      "12: routes[2].match.path_prefix: requests are matched on their normalized path: write "
      "\"/api/\" instead of \"/api;jsessionid=x/\"",
      "15: routes[3].match.path_prefix: invalid path \"/api/../admin\": dot segments in path"}},
    {"path_not_absolute.yaml",
     {"6: routes[0].match.path_prefix: must start with \"/\", got \"api/\"",
      "9: routes[1].match.path_exact: must start with \"/\", got \"health\""}},
    {"bad_regex.yaml",
     {"7: routes[0].match.path_regex: invalid regular expression: mismatched ( and ) in "
      "\"/users/([0-9]+\"",
      "11: routes[1].match.path_regex: invalid regular expression: mismatched [ and ] in "
      "\"/items/[0-9\""}},
    {"bad_method.yaml",
     {"8: routes[0].match.methods[1]: invalid method \"PO ST\"",
      "13: routes[1].match.methods: must list at least one method (omit the key to allow any "
      "method)"}},
    {"bad_host.yaml",
     {"8: routes[0].match.host: must be a host name without a port, got "
      "\"api.example.com:8080\""}},
    {"strip_prefix_without_prefix.yaml",
     {"8: routes[0].strip_prefix: only valid with match.path_prefix"}},
    {"unknown_upstream.yaml", {"7: routes[0].upstream: unknown upstream \"users\""}},
    // The example of the product's configuration contract, line for line.
    {"unknown_limit.yaml", {"14: routes[2].limits[0]: unknown limit \"per_user\""}},
    {"duplicate_limit_in_route.yaml",
     {"10: routes[0].limits[1]: limit \"per_ip\" is listed twice"}},
    // YAML mistakes that yaml-cpp reports in words that do not name them.
    {"tab_indentation.yaml",
     {"3: syntax error: a tab in the indentation (YAML indents with spaces only)"}},
    {"merge_key.yaml",
     {"10: limits.per_path: YAML merge keys (\"<<\") are not supported: write the keys out (an "
      "alias of a whole value, \"key: *anchor\", works)"}},
    // Read with the process environment, where none of these variables is set.
    {"env_not_set.yaml",
     {"3: upstreams.app.servers[0]: environment variable SLUICE_FIXTURE_NEVER_SET_UPSTREAM is "
      "not set",
      "5: redis.url: environment variable SLUICE_FIXTURE_NEVER_SET_REDIS_URL is not set",
      "7: redis.timeout_ms: expected an integer, got \"fifty\"",
      "9: log.level: unterminated \"${\" (write \"$${\" for a literal \"${\")"}},
};

ConfigResult parse(std::string_view yaml) {
  return parse_config(yaml, "test.yaml");
}

// Parses YAML that must be valid.
std::shared_ptr<const Config> parse_ok(std::string_view yaml) {
  auto result = parse(yaml);
  INFO((result.errors.empty() ? std::string() : result.errors.front()));
  REQUIRE(result.errors.empty());
  REQUIRE(result.config);
  return result.config;
}

const char* const kMinimalTail = R"(
upstreams:
  app:
    servers: ["127.0.0.1:9000"]
routes: []
)";

}  // namespace

TEST_CASE("every bad fixture gives exactly its messages", "[config]") {
  for (const auto& fixture : kBadFixtures) {
    const std::string path = kFixtures + "/bad/" + fixture.file;
    std::vector<std::string> expected;
    for (const auto& e : fixture.errors) expected.push_back(path + ":" + e);
    const auto result = load_config_file(path);
    INFO(path);
    CHECK_FALSE(result.config);
    CHECK(result.errors == expected);
  }
}

TEST_CASE("every file under fixtures/bad is in the table", "[config]") {
  std::set<std::string> listed;
  for (const auto& fixture : kBadFixtures) {
    CHECK(listed.insert(fixture.file).second);  // no fixture listed twice
  }
  std::set<std::string> on_disk;
  for (const auto& entry : std::filesystem::directory_iterator(kFixtures + "/bad")) {
    on_disk.insert(entry.path().filename().string());
  }
  CHECK(on_disk == listed);
}

TEST_CASE("full.yaml: every key is parsed", "[config]") {
  const auto result = load_config_file(kFixtures + "/good/full.yaml");
  INFO((result.errors.empty() ? std::string() : result.errors.front()));
  REQUIRE(result.errors.empty());
  const Config& c = *result.config;
  CHECK(c.source == kFixtures + "/good/full.yaml");

  CHECK(c.server.listen.host == "::1");
  CHECK(c.server.listen.port == 8443);
  CHECK(c.server.listen.to_string() == "[::1]:8443");
  CHECK(c.server.threads == 4);
  CHECK(c.server.max_header_bytes == 8192);
  CHECK(c.server.max_body_bytes == 1048576);
  CHECK(c.server.header_timeout == Millis(5000));
  CHECK(c.server.idle_timeout == Millis(30000));
  CHECK(c.server.drain_timeout == Millis(2000));
  REQUIRE(c.server.trusted_proxies.size() == 3);
  CHECK(c.server.trusted_proxies[0].to_string() == "10.0.0.0/8");
  CHECK(c.server.trusted_proxies[1].to_string() == "192.168.1.7/32");
  CHECK(c.server.trusted_proxies[2].to_string() == "fd00::/8");

  CHECK(c.admin.listen.to_string() == "0.0.0.0:9902");
  CHECK(c.log.level == "debug");
  CHECK_FALSE(c.log.access_log);

  CHECK(c.redis.url == "rediss://sluice:s%40cret@redis.internal:6380/2");
  CHECK(c.redis.tls);
  CHECK(c.redis.host == "redis.internal");
  CHECK(c.redis.port == 6380);
  CHECK(c.redis.user == "sluice");
  CHECK(c.redis.password == "s@cret");
  CHECK(c.redis.db == 2);
  CHECK(c.redis.timeout == Millis(75));
  CHECK(c.redis.connect_timeout == Millis(500));
  CHECK(c.redis.key_prefix == "rl:");
  CHECK(c.redis.circuit_breaker.failures == 3);
  CHECK(c.redis.circuit_breaker.open == Millis(2500));
  CHECK(c.redis.tls_ca_file == "/etc/sluice/ca.pem");
  CHECK(c.redis.tls_cert_file == "/etc/sluice/client.pem");
  CHECK(c.redis.tls_key_file == "/etc/sluice/client.key");
  CHECK(c.redis.tls_server_name == "redis.example.com");

  REQUIRE(c.upstreams.size() == 2);
  const auto& orders = c.upstreams[0];
  CHECK(orders.name == "orders");
  REQUIRE(orders.servers.size() == 3);
  CHECK(orders.servers[0].to_string() == "127.0.0.1:9001");
  CHECK(orders.servers[1].host == "orders-2.internal");
  CHECK(orders.servers[1].port == 9002);
  CHECK(orders.servers[2].host == "::1");
  CHECK(orders.connect_timeout == Millis(250));
  CHECK(orders.response_timeout == Millis(10000));
  CHECK(orders.max_idle_connections == 8);
  CHECK(orders.fail_cooldown == Millis(5000));
  const auto& users = c.upstreams[1];
  CHECK(users.name == "users");
  CHECK(users.connect_timeout == Millis(1000));
  CHECK(users.fail_cooldown == Millis(2000));
  CHECK(c.find_upstream("users") == &users);
  CHECK(c.find_upstream("nope") == nullptr);

  CHECK(c.api_keys.header == "Authorization");
  CHECK(c.api_keys.default_plan == "basic");
  REQUIRE(c.api_keys.consumers.size() == 2);
  CHECK(c.api_keys.consumers[1].key == "demo-team-key");
  CHECK(c.api_keys.consumers[1].plan == "team");
  CHECK(c.api_keys.plan_by_key.size() == 2);
  CHECK(c.api_keys.plan_by_key.at("demo-pro-key") == "pro");

  REQUIRE(c.limits.size() == 4);
  const auto* per_key = c.find_limit("per_key");
  REQUIRE(per_key == &c.limits[0]);
  REQUIRE(per_key->key.size() == 1);
  CHECK(per_key->key[0].kind == KeySource::Kind::kApiKey);
  CHECK(per_key->bucket.capacity == 50);
  CHECK(per_key->bucket.refill_per_second == 10);
  CHECK(per_key->for_plan("pro").capacity == 500);
  CHECK(per_key->for_plan("pro").refill_per_second == 100);
  // A partial override inherits the rest from the limit.
  CHECK(per_key->for_plan("team").capacity == 50);
  CHECK(per_key->for_plan("team").refill_per_second == 0.5);
  CHECK(per_key->for_plan("free").capacity == 50);
  const auto* composite = c.find_limit("composite");
  REQUIRE(composite);
  REQUIRE(composite->key.size() == 5);
  CHECK(composite->key[0].kind == KeySource::Kind::kApiKey);
  CHECK(composite->key[1].kind == KeySource::Kind::kPath);
  CHECK(composite->key[2].kind == KeySource::Kind::kRoute);
  CHECK(composite->key[3].kind == KeySource::Kind::kHeader);
  CHECK(composite->key[3].name == "X-Tenant");
  CHECK(composite->key[4].kind == KeySource::Kind::kQuery);
  CHECK(composite->key[4].name == "region");
  CHECK(composite->bucket.refill_per_second == 0.25);
  CHECK(c.find_limit("orders_global")->key[0].kind == KeySource::Kind::kGlobal);
  CHECK(c.find_limit("per_ip")->key[0].kind == KeySource::Kind::kIp);

  REQUIRE(c.routes.size() == 3);
  const auto& r0 = c.routes[0];
  CHECK(r0.name == "orders");
  CHECK(r0.match.path_kind == RouteMatch::PathKind::kPrefix);
  CHECK(r0.match.path == "/api/orders");
  CHECK(r0.match.methods == std::vector<std::string>{"GET", "POST"});  // stored upper-case
  CHECK(r0.match.host == "api.example.com");                           // stored lower-case
  CHECK(r0.upstream == "orders");
  CHECK(r0.upstream_index == 0);
  CHECK(r0.strip_prefix);
  CHECK(r0.limits == std::vector<std::string>{"per_key", "orders_global"});
  CHECK(r0.limit_indexes == std::vector<std::size_t>{0, 2});
  CHECK(r0.cost == 2);
  CHECK(r0.on_redis_failure == FailureMode::kClosed);
  const auto& r1 = c.routes[1];
  CHECK(r1.match.path_kind == RouteMatch::PathKind::kRegex);
  REQUIRE(r1.match.regex);
  CHECK(r1.upstream_index == 1);
  CHECK(r1.limit_indexes == std::vector<std::size_t>{3, 1});
  CHECK(r1.cost == 0.5);
  CHECK(r1.on_redis_failure == FailureMode::kOpen);
  const auto& r2 = c.routes[2];
  CHECK(r2.match.path_kind == RouteMatch::PathKind::kExact);
  CHECK(r2.match.methods.empty());
  CHECK(r2.limits.empty());
  CHECK_FALSE(r2.strip_prefix);
  CHECK(r2.cost == 1);
}

TEST_CASE("minimal.yaml: defaults everywhere", "[config]") {
  const auto result = load_config_file(kFixtures + "/good/minimal.yaml");
  REQUIRE(result.errors.empty());
  const Config& c = *result.config;
  CHECK(c.server.listen.to_string() == "0.0.0.0:8080");
  CHECK(c.server.threads == 0);
  CHECK(c.server.max_header_bytes == 16384);
  CHECK(c.server.max_body_bytes == 10485760);
  CHECK(c.server.header_timeout == Millis(10000));
  CHECK(c.server.idle_timeout == Millis(60000));
  CHECK(c.server.drain_timeout == Millis(10000));
  REQUIRE(c.server.trusted_proxies.size() == 1);
  CHECK(c.server.trusted_proxies[0].to_string() == "127.0.0.1/32");
  CHECK(c.admin.listen.to_string() == "127.0.0.1:9901");
  CHECK(c.log.level == "info");
  CHECK(c.log.access_log);
  CHECK(c.redis.url == "redis://127.0.0.1:6379/0");
  CHECK_FALSE(c.redis.tls);
  CHECK(c.redis.host == "127.0.0.1");
  CHECK(c.redis.port == 6379);
  CHECK(c.redis.db == 0);
  CHECK(c.redis.timeout == Millis(50));
  CHECK(c.redis.connect_timeout == Millis(1000));
  CHECK(c.redis.key_prefix == "sluice:");
  CHECK(c.redis.circuit_breaker.failures == 5);
  CHECK(c.redis.circuit_breaker.open == Millis(1000));
  CHECK(c.redis.tls_server_name.empty());
  CHECK(c.api_keys.header == "X-API-Key");
  CHECK(c.api_keys.default_plan == "free");
  CHECK(c.api_keys.consumers.empty());
  CHECK(c.limits.empty());
  REQUIRE(c.upstreams.size() == 1);
  CHECK(c.upstreams[0].max_idle_connections == 64);
  CHECK(c.upstreams[0].response_timeout == Millis(30000));
  REQUIRE(c.routes.size() == 1);
  CHECK(c.routes[0].match.path == "/");
  CHECK(c.routes[0].cost == 1);
  CHECK(c.routes[0].on_redis_failure == FailureMode::kOpen);
}

TEST_CASE("empty lists are valid", "[config]") {
  const auto result = load_config_file(kFixtures + "/good/empty_lists.yaml");
  REQUIRE(result.errors.empty());
  CHECK(result.config->server.trusted_proxies.empty());  // [] trusts no one
  CHECK(result.config->upstreams.empty());
  CHECK(result.config->routes.empty());

  const auto c = parse_ok(R"(
upstreams:
  app: { servers: ["127.0.0.1:9000"] }
limits:
  per_ip: { key: ip, capacity: 1, refill_per_second: 1 }
routes:
  - { name: a, match: { path_prefix: "/" }, upstream: app, limits: [] }
)");
  CHECK(c->routes[0].limits.empty());
  CHECK(c->routes[0].limit_indexes.empty());
}

TEST_CASE("conf/sluice.yaml is valid", "[config]") {
  const auto result = load_config_file(kFixtures + "/../../conf/sluice.yaml");
  INFO((result.errors.empty() ? std::string() : result.errors.front()));
  REQUIRE(result.errors.empty());
  const Config& c = *result.config;
  CHECK(c.server.listen.to_string() == "127.0.0.1:8080");
  CHECK(c.admin.listen.to_string() == "127.0.0.1:9901");
  CHECK(c.redis.url == "redis://127.0.0.1:6379/0");
  REQUIRE(c.find_upstream("demo"));
  CHECK(c.find_upstream("demo")->servers[0].to_string() == "127.0.0.1:9000");
  REQUIRE(c.routes.size() == 2);
  // The api route is limited per API key and globally: no per-IP limit smaller
  // than the pro plan hides it.
  CHECK(c.routes[0].limits == std::vector<std::string>{"per_key", "global"});
  CHECK(c.find_limit("per_key")->for_plan("pro").capacity == 500);
  CHECK(c.find_limit("per_key")->for_plan("free").capacity == 50);
  CHECK(c.api_keys.plan_by_key.at("demo-pro-key") == "pro");
  CHECK(c.api_keys.plan_by_key.at("demo-free-key") == "free");
  // The catch-all is limited too: methods the api route does not list end there.
  CHECK(c.routes[1].match.path == "/");
  CHECK(c.routes[1].limits == std::vector<std::string>{"per_ip"});
  CHECK(result.warnings.empty());
}

TEST_CASE("the contract's example configuration is valid", "[config]") {
  const auto c = parse_ok(R"(
server:
  listen: "0.0.0.0:8080"
  threads: 0
  max_header_bytes: 16384
  max_body_bytes: 10485760
  header_timeout_ms: 10000
  idle_timeout_ms: 60000
  drain_timeout_ms: 10000
  trusted_proxies: ["127.0.0.1/32"]
admin:
  listen: "127.0.0.1:9901"
log:
  level: info
  access_log: true
redis:
  url: "redis://127.0.0.1:6379/0"
  timeout_ms: 50
  key_prefix: "sluice:"
  circuit_breaker:
    failures: 5
    open_ms: 1000
upstreams:
  orders:
    servers: ["127.0.0.1:9001", "127.0.0.1:9002"]
    connect_timeout_ms: 1000
    response_timeout_ms: 30000
    max_idle_connections: 64
api_keys:
  header: "X-API-Key"
  consumers:
    - { key: "demo-pro-key", plan: pro }
  default_plan: free
limits:
  per_key:
    key: api_key
    capacity: 50
    refill_per_second: 10
    plans:
      pro: { capacity: 500, refill_per_second: 100 }
  per_ip:
    key: ip
    capacity: 20
    refill_per_second: 5
  orders_global:
    key: global
    capacity: 1000
    refill_per_second: 500
routes:
  - name: orders
    match:
      path_prefix: "/api/orders"
      methods: [GET, POST]
      host: "api.example.com"
    upstream: orders
    strip_prefix: false
    limits: [per_key, orders_global]
    cost: 1
    on_redis_failure: open
)");
  CHECK(c->routes[0].limit_indexes == std::vector<std::size_t>{0, 2});
}

TEST_CASE("a file that cannot be read is one error", "[config]") {
  const auto missing = load_config_file(kFixtures + "/no-such-file.yaml");
  CHECK_FALSE(missing.config);
  CHECK(missing.errors ==
        std::vector<std::string>{kFixtures + "/no-such-file.yaml: cannot read file: No "
                                             "such file or directory"});
  const auto directory = load_config_file(kFixtures);
  CHECK(directory.errors ==
        std::vector<std::string>{kFixtures + ": cannot read file: Is a directory"});
}

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
  SECTION("back-references are rejected: regexes run in linear-stack mode") {
    CHECK(parse(head + "  - { name: a, match: { path_regex: '/(a)\\1' }, upstream: app }").errors ==
          std::vector<std::string>{"test.yaml:5: routes[0].match.path_regex: invalid regular "
                                   "expression: back-references are not supported in \"/(a)\\\\1\""});
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
  SECTION("plan_by_key is built from consumers") {
    const auto c = parse_ok(R"(
api_keys:
  consumers:
    - { key: k1, plan: pro }
    - { key: k2, plan: free }
)" + tail);
    CHECK(c->api_keys.plan_by_key ==
          std::unordered_map<std::string, std::string>{{"k1", "pro"}, {"k2", "free"}});
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

TEST_CASE("parse_redis_url", "[config]") {
  RedisConfig r;
  SECTION("plain, with every part") {
    REQUIRE_FALSE(parse_redis_url("redis://alice:p%3Ass@10.0.0.5:6380/3", r));
    CHECK_FALSE(r.tls);
    CHECK(r.host == "10.0.0.5");
    CHECK(r.port == 6380);
    CHECK(r.user == "alice");
    CHECK(r.password == "p:ss");
    CHECK(r.db == 3);
  }
  SECTION("defaults: port 6379, db 0, no auth") {
    REQUIRE_FALSE(parse_redis_url("redis://localhost", r));
    CHECK(r.host == "localhost");
    CHECK(r.port == 6379);
    CHECK(r.db == 0);
    CHECK(r.user.empty());
    CHECK(r.password.empty());
    REQUIRE_FALSE(parse_redis_url("redis://localhost:7000/", r));
    CHECK(r.port == 7000);
    CHECK(r.db == 0);
  }
  SECTION("a lone userinfo word is the password; :password has no user") {
    REQUIRE_FALSE(parse_redis_url("redis://secret@h:1", r));
    CHECK(r.user.empty());
    CHECK(r.password == "secret");
    REQUIRE_FALSE(parse_redis_url("redis://:secret@h:1", r));
    CHECK(r.user.empty());
    CHECK(r.password == "secret");
  }
  SECTION("rediss and IPv6") {
    REQUIRE_FALSE(parse_redis_url("rediss://[::1]:6390/1", r));
    CHECK(r.tls);
    CHECK(r.host == "::1");
    CHECK(r.port == 6390);
    CHECK(r.db == 1);
  }
  SECTION("errors") {
    CHECK(parse_redis_url("tcp://h:1", r) == "must start with redis:// or rediss://");
    CHECK(parse_redis_url("redis://", r) == "has no host");
    CHECK(parse_redis_url("redis://:6379", r) == "has no host");
    CHECK(parse_redis_url("redis://h:", r) == "port must be between 1 and 65535");
    CHECK(parse_redis_url("redis://h:65536", r) == "port must be between 1 and 65535");
    CHECK(parse_redis_url("redis://h:1/x", r) == "database must be a non-negative integer");
    CHECK(parse_redis_url("redis://h:1/-1", r) == "database must be a non-negative integer");
    CHECK(parse_redis_url("redis://h:1/0?timeout=1", r) ==
          "must not have a query string or fragment");
    CHECK(parse_redis_url("redis://a:%zz@h", r) == "has an invalid percent-escape");
    CHECK(parse_redis_url("redis://[::1:6379", r) == "has an invalid host");
    CHECK(parse_redis_url("redis://bad host", r) == "has an invalid host");
  }
  SECTION("a failed parse leaves the config unchanged") {
    r.host = "keep";
    CHECK(parse_redis_url("redis://h:0", r));
    CHECK(r.host == "keep");
  }
}

TEST_CASE("default-constructed config trusts 127.0.0.1 only", "[config]") {
  const ServerConfig server;
  REQUIRE(server.trusted_proxies.size() == 1);
  CHECK(server.trusted_proxies[0].to_string() == "127.0.0.1/32");
}

}  // namespace sluice
