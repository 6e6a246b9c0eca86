// Helpers for tests that parse configuration text: parse() reads YAML with the
// process environment, parse_ok() requires it to be valid, and kMinimalTail
// completes a document with the required sections. Test files share them
// rather than keep copies (a unity build compiles several test files as one).
#pragma once

#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "gateway/config/load.hpp"

namespace sluice::testing {

inline ConfigResult parse(std::string_view yaml) {
  return parse_config(yaml, "test.yaml");
}

// Parses YAML that must be valid.
inline std::shared_ptr<const Config> parse_ok(std::string_view yaml) {
  auto result = parse(yaml);
  INFO((result.errors.empty() ? std::string() : result.errors.front()));
  REQUIRE(result.errors.empty());
  REQUIRE(result.config);
  return result.config;
}

inline const char* const kMinimalTail = R"(
upstreams:
  app:
    servers: ["127.0.0.1:9000"]
routes: []
)";

// The same, with no environment variables at all (a ${VAR} is unset).
inline ConfigResult parse_no_env(std::string_view yaml) {
  return parse_config(yaml, "test.yaml", [](std::string_view) { return std::nullopt; });
}
inline std::shared_ptr<const Config> parse_ok_no_env(std::string_view yaml) {
  auto result = parse_no_env(yaml);
  INFO((result.errors.empty() ? std::string() : result.errors.front()));
  REQUIRE(result.config);
  return result.config;
}

#ifdef SLUICE_FIXTURES_DIR
inline const std::string kFixtures = SLUICE_FIXTURES_DIR;  // tests/fixtures

// A shipped configuration (conf/NAME) read as `sluice --config` reads it, with
// SLUICE_KEY_SECRET_FILE naming a test secret (as scripts/run sets it) and no
// other environment variable.
inline ConfigResult load_shipped_config(const std::string& name) {
  std::ifstream in(kFixtures + "/../../conf/" + name);
  std::stringstream text;
  text << in.rdbuf();
  const std::string secret = kFixtures + "/demo-key-secret";
  return parse_config(text.str(), name, [secret](std::string_view var) -> std::optional<std::string> {
    if (var == "SLUICE_KEY_SECRET_FILE") return secret;
    return std::nullopt;
  });
}
#endif

}  // namespace sluice::testing
