// Helpers for tests that parse configuration text: parse() reads YAML with the
// process environment, parse_ok() requires it to be valid, and kMinimalTail
// completes a document with the required sections. Test files share them
// rather than keep copies (a unity build compiles several test files as one).
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
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
// SLUICE_KEY_SECRET_FILE naming a copy of the test secret that only its owner
// may read (as scripts/run makes it) and no other environment variable.
inline ConfigResult load_shipped_config(const std::string& name) {
  namespace fs = std::filesystem;
  std::ifstream in(kFixtures + "/../../conf/" + name);
  std::stringstream text;
  text << in.rdbuf();
  const fs::path secret =
      fs::temp_directory_path() / ("sluice-demo-key-secret-" + std::to_string(::getpid()));
  fs::copy_file(kFixtures + "/demo-key-secret", secret, fs::copy_options::overwrite_existing);
  fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write);
  auto result = parse_config(
      text.str(), name, [path = secret.string()](std::string_view var) -> std::optional<std::string> {
        if (var == "SLUICE_KEY_SECRET_FILE") return path;
        return std::nullopt;
      });
  std::error_code ignored;
  fs::remove(secret, ignored);
  return result;
}
#endif

}  // namespace sluice::testing
