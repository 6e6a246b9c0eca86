// The top-level plans list and the consumer store's settings: every plan
// named anywhere must be declared, and the store needs the plans and a key
// secret.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "support/config_text.hpp"
#include "support/redis_server_fixture.hpp"

namespace plans_store_test {

using sluice::testing::kMinimalTail;

std::vector<std::string> errors(const std::string& yaml) {
  return sluice::testing::parse(yaml + kMinimalTail).errors;
}

}  // namespace plans_store_test

using namespace plans_store_test;

TEST_CASE("plans: declared once, every plan named must be listed", "[config][plans]") {
  const auto c = sluice::testing::parse_ok(
      "plans: [free, pro]\napi_keys:\n  consumers:\n    - {key: k1, plan: pro, id: acme}\n" +
      std::string(kMinimalTail));
  CHECK(c->plans == std::vector<std::string>{"free", "pro"});
  CHECK(c->api_keys.consumers.front().id == "acme");
  CHECK(sluice::is_known_plan(*c, "pro"));
  CHECK_FALSE(sluice::is_known_plan(*c, "gold"));
  CHECK(errors("plans: [free, pro]\napi_keys:\n  consumers:\n    - {key: k1, plan: gold}\n") ==
        std::vector<std::string>{
            "test.yaml:4: api_keys.consumers[0].plan: unknown plan \"gold\": not in plans (free, "
            "pro)"});
  CHECK(errors("plans: [pro]\n") ==
        std::vector<std::string>{
            "test.yaml:1: plans: does not list \"free\", the default api_keys.default_plan"});
  CHECK(errors("plans: [free, free]\n") ==
        std::vector<std::string>{"test.yaml:1: plans[1]: plan \"free\" is listed twice"});
  CHECK(errors("plans: []\n") ==
        std::vector<std::string>{"test.yaml:1: plans: must list at least one plan"});
  CHECK(errors("plans: [free]\nexemptions:\n  plans: [vip]\n") ==
        std::vector<std::string>{
            "test.yaml:3: exemptions.plans[0]: unknown plan \"vip\": not in plans (free)"});
  CHECK(errors("api_keys:\n  consumers:\n    - {key: k1, plan: pro, id: \"a/b\"}\n").size() == 1);
}

TEST_CASE("consumer store: its settings and what it requires", "[config][plans]") {
  sluice::test::TempDir dir;
  const std::string secret = dir.file("secret");
  std::ofstream(secret) << "0123456789abcdef-more-bytes\n";
  const auto c = sluice::testing::parse_ok(
      "plans: [free, pro]\nredis:\n  key_secret_file: " + secret +
      "\napi_keys:\n  store: redis\n  cache_ttl_ms: 5000\n  unknown_cache_ttl_ms: 100\n"
      "  cache_max_entries: 42\n  unknown_key: reject\n  forward_consumer: false\n" +
      std::string(kMinimalTail));
  CHECK(c->api_keys.store == sluice::ApiKeysConfig::Store::kRedis);
  CHECK(c->api_keys.cache_ttl == std::chrono::milliseconds(5000));
  CHECK(c->api_keys.unknown_cache_ttl == std::chrono::milliseconds(100));
  CHECK(c->api_keys.cache_max_entries == 42);
  CHECK(c->api_keys.unknown_key == sluice::ApiKeysConfig::UnknownKey::kReject);
  CHECK_FALSE(c->api_keys.forward_consumer);
  CHECK(errors("api_keys:\n  store: redis\n") ==
        std::vector<std::string>{
            "test.yaml:2: api_keys.store: redis needs the top-level plans list (the plans "
            "consumers may be on)",
            "test.yaml:2: api_keys.store: redis needs redis.key_secret_file: consumer keys are "
            "kept in Redis only as HMAC fingerprints under that secret"});
  CHECK(errors("api_keys:\n  store: etcd\n") ==
        std::vector<std::string>{
            "test.yaml:2: api_keys.store: unknown store \"etcd\" (expected none or redis)"});
  CHECK(errors("api_keys:\n  unknown_key: deny\n") ==
        std::vector<std::string>{
            "test.yaml:2: api_keys.unknown_key: unknown value \"deny\" (expected missing or "
            "reject)"});
}
