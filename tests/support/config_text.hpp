// Helpers for tests that parse configuration text: parse() reads YAML with the
// process environment, parse_ok() requires it to be valid, and kMinimalTail
// completes a document with the required sections.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
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

}  // namespace sluice::testing
