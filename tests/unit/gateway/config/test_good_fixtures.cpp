// The good fixtures and the shipped configurations parse to the values they hold.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gateway/config/load.hpp"
#include "support/config_text.hpp"

namespace sluice {
namespace {

using testing::parse_ok;

using testing::kFixtures;

}  // namespace

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
  CHECK(users.protocol == UpstreamProtocol::kH2c);
  CHECK(orders.protocol == UpstreamProtocol::kHttp1);
  CHECK(c.find_upstream("users") == &users);
  CHECK(c.find_upstream("nope") == nullptr);

  CHECK(c.api_keys.header == "Authorization");
  CHECK(c.api_keys.default_plan == "basic");
  REQUIRE(c.api_keys.consumers.size() == 2);
  CHECK(c.api_keys.consumers[1].key == "demo-team-key");
  CHECK(c.api_keys.consumers[1].plan == "team");
  CHECK(c.api_keys.consumer_index.size() == 2);
  CHECK(c.api_keys.consumers[c.api_keys.consumer_index.at("demo-pro-key")].plan == "pro");

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
  CHECK(r0.ignore_client_abort);
  const auto& r1 = c.routes[1];
  CHECK(r1.match.path_kind == RouteMatch::PathKind::kRegex);
  REQUIRE(r1.match.regex);
  CHECK(r1.upstream_index == 1);
  CHECK(r1.limit_indexes == std::vector<std::size_t>{3, 1});
  CHECK(r1.cost == 0.5);
  CHECK(r1.on_redis_failure == FailureMode::kOpen);
  CHECK_FALSE(r1.ignore_client_abort);  // the default
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
  CHECK(c.upstreams[0].protocol == UpstreamProtocol::kHttp1);
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
  const auto result = sluice::testing::load_shipped_config("sluice.yaml");
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
  // The consumers live in the store (scripts/run creates the demo's two).
  CHECK(c.api_keys.store == ApiKeysConfig::Store::kRedis);
  CHECK(c.api_keys.consumers.empty());
  CHECK(c.plans == std::vector<std::string>{"free", "pro"});
  CHECK(!c.redis.key_secret.empty());
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

}  // namespace sluice
