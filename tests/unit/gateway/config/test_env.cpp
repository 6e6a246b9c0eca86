// Environment expansion in configuration values: the pure expansion, and the
// parser with an injected environment (values from it are validated like
// literal ones, and secrets stay out of messages).
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "gateway/config/env.hpp"
#include "gateway/config/load.hpp"

namespace sluice {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string expanded(std::string_view value, const EnvLookup& env) {
  const auto e = expand_env(value, env);
  REQUIRE(e.error.empty());
  return e.text;
}

std::string expansion_error(std::string_view value, const EnvLookup& env) {
  return expand_env(value, env).error;
}

const char* const kTail = R"(
upstreams:
  app:
    servers: ["127.0.0.1:9000"]
routes: []
)";

}  // namespace

TEST_CASE("expand_env: ${VAR} and ${VAR:-default}", "[config][env]") {
  const auto env = env_of({{"HOST", "10.0.0.1"}, {"PORT", "6380"}, {"EMPTY", ""}});
  CHECK(expanded("redis://${HOST}:${PORT}/0", env) == "redis://10.0.0.1:6380/0");
  CHECK(expanded("${HOST}", env) == "10.0.0.1");
  SECTION("a set but empty variable is empty; :- takes the default for unset or empty") {
    CHECK(expanded("[${EMPTY}]", env) == "[]");
    CHECK(expanded("${EMPTY:-x}", env) == "x");
    CHECK(expanded("${MISSING:-redis://redis:6379}", env) == "redis://redis:6379");
    CHECK(expanded("${MISSING:-}", env) == "");
    CHECK(expanded("${HOST:-ignored}", env) == "10.0.0.1");
  }
  SECTION("no expansion without ${; $${ is a literal ${") {
    CHECK(expanded("/items/[0-9]+$", env) == "/items/[0-9]+$");
    CHECK(expanded("a$b$$c", env) == "a$b$$c");
    CHECK(expanded("$${HOST}", env) == "${HOST}");
    CHECK(expanded("x$${HOST}${HOST}", env) == "x${HOST}10.0.0.1");
  }
  SECTION("not recursive: a value holding ${ is kept as it is") {
    const auto nested = env_of({{"A", "${B}"}, {"B", "b"}});
    CHECK(expanded("${A}", nested) == "${B}");
    CHECK(expanded("${MISSING:-${B}", nested) == "${B");  // the default ends at the first }
  }
  SECTION("from_environment tells whether anything was replaced") {
    CHECK(expand_env("${HOST}", env).from_environment);
    CHECK_FALSE(expand_env("$${HOST}", env).from_environment);
    CHECK_FALSE(expand_env("plain", env).from_environment);
  }
  SECTION("errors name the variable, never a value") {
    CHECK(expansion_error("${REDIS_URL}", env) == "environment variable REDIS_URL is not set");
    CHECK(expansion_error("${HOST", env) ==
          "unterminated \"${\" (write \"$${\" for a literal \"${\")");
    CHECK(expansion_error("${1X}", env) ==
          "invalid environment variable name \"1X\" (use letters, digits and \"_\"; write "
          "\"$${\" for a literal \"${\")");
    CHECK(expansion_error("${}", env).starts_with("invalid environment variable name \"\""));
    CHECK(expansion_error("${A-B}", env).starts_with("invalid environment variable name \"A-B\""));
  }
}

TEST_CASE("parse_config expands scalar values from the environment", "[config][env]") {
  const auto env = env_of({{"SLUICE_REDIS_URL", "redis://:hunter2@10.1.2.3:6390/2"},
                           {"SLUICE_UPSTREAM", "127.0.0.1:9100"},
                           {"THREADS", "3"},
                           {"ACCESS_LOG", "false"},
                           {"PRO_KEY", "k-from-env"}});
  const auto result = parse_config(R"(
server:
  threads: ${THREADS}
log:
  access_log: ${ACCESS_LOG}
redis:
  url: "${SLUICE_REDIS_URL}"
  key_prefix: "$${literal}:"
upstreams:
  app:
    servers: ["${SLUICE_UPSTREAM:-upstream:9000}", "${OTHER:-backup.internal:9000}"]
api_keys:
  consumers:
    - { key: "${PRO_KEY}", plan: pro }
routes: []
)",
                                   "test.yaml", env);
  INFO((result.errors.empty() ? std::string() : result.errors.front()));
  REQUIRE(result.config);
  const Config& c = *result.config;
  CHECK(c.server.threads == 3);
  CHECK_FALSE(c.log.access_log);
  CHECK(c.redis.host == "10.1.2.3");
  CHECK(c.redis.port == 6390);
  CHECK(c.redis.password == "hunter2");
  CHECK(c.redis.db == 2);
  CHECK(c.redis.key_prefix == "${literal}:");
  REQUIRE(c.upstreams[0].servers.size() == 2);
  CHECK(c.upstreams[0].servers[0].to_string() == "127.0.0.1:9100");
  CHECK(c.upstreams[0].servers[1].to_string() == "backup.internal:9000");
  CHECK(c.api_keys.consumers[c.api_keys.consumer_index.at("k-from-env")].plan == "pro");
}

TEST_CASE("values from the environment are validated like literal ones", "[config][env]") {
  const auto env = env_of({{"THREADS", "many"},
                           {"LISTEN", "localhost:8080"},
                           {"URL", "redis://:hunter2@h:99999"},
                           {"LEVEL", "verbose"},
                           {"EMPTY", ""}});
  const auto result = parse_config(R"(server:
  threads: ${THREADS}
  listen: "${LISTEN}"
redis:
  url: ${URL}
log:
  level: ${LEVEL}
api_keys:
  default_plan: "${EMPTY}"
)" + std::string(kTail),
                                   "test.yaml", env);
  CHECK(result.errors ==
        std::vector<std::string>{
            "test.yaml:2: server.threads: expected an integer, got \"many\"",
            "test.yaml:3: server.listen: host must be an IP address, not a name, got "
            "\"localhost:8080\"",
            "test.yaml:5: redis.url: invalid url: port must be between 1 and 65535, got "
            "\"redis://:***@h:99999\"",
            "test.yaml:7: log.level: unknown log level \"verbose\" (expected trace, debug, info, "
            "warn or error)",
            "test.yaml:9: api_keys.default_plan: must not be empty"});
}

TEST_CASE("expansion errors carry file, line and key path", "[config][env]") {
  const auto result = parse_config(R"(redis:
  url: "${REDIS_URL}"
  timeout_ms: ${TIMEOUT:-50}
api_keys:
  consumers:
    - { key: "${PRO_KEY}", plan: "${PLAN:-pro}" }
)" + std::string(kTail),
                                   "sluice.yaml", env_of({}));
  CHECK(result.errors ==
        std::vector<std::string>{
            "sluice.yaml:2: redis.url: environment variable REDIS_URL is not set",
            "sluice.yaml:6: api_keys.consumers[0].key: environment variable PRO_KEY is not set"});
}

TEST_CASE("keys are never expanded", "[config][env]") {
  const auto result = parse_config("${SECTION}:\n  threads: 2\n" + std::string(kTail), "test.yaml",
                                   env_of({{"SECTION", "server"}}));
  CHECK(result.errors ==
        std::vector<std::string>{"test.yaml:1: ${SECTION}: unknown key \"${SECTION}\""});
}

TEST_CASE("API keys from the environment are never shown", "[config][env]") {
  const std::string long_key(300, 'k');
  const auto result = parse_config(R"(api_keys:
  consumers:
    - { key: "${LONG}", plan: pro }
)" + std::string(kTail),
                                   "test.yaml", env_of({{"LONG", long_key}}));
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0] == "test.yaml:3: api_keys.consumers[0].key: longer than 256 bytes");
}

}  // namespace sluice
