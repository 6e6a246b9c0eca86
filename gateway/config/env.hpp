// Environment expansion of configuration values: "${VAR}" and "${VAR:-default}".
//
// It is applied to scalar values only (never to mapping keys), once, before a
// value is validated, so a value from the environment is checked exactly as a
// literal one would be. Expansion is not recursive: text taken from a variable or
// a default is used as it is. The rules, which docs/configuration.md repeats:
//   ${NAME}           the variable's value; unset is an error, set but empty is ""
//   ${NAME:-default}  the variable's value when set and non-empty, else `default`
//                     (everything up to the first "}")
//   $${               a literal "${" (the only escape); any other "$" is literal
// NAME is [A-Za-z_][A-Za-z0-9_]*. Messages name the variable, never its value.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

// Looks a variable up: its value, or nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// The process environment (getenv).
EnvLookup process_environment();

struct Expansion {
  std::string text;               // the expanded value (when error is empty)
  std::string error;              // e.g. "environment variable REDIS_URL is not set"
  bool from_environment = false;  // a ${...} was replaced
};

// Expands one scalar value. Pure apart from `env`.
Expansion expand_env(std::string_view value, const EnvLookup& env);

}  // namespace sluice
