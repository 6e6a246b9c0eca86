// Loading a configuration: from a file or from YAML text, to either a whole
// validated Config or every error as "file:line: key.path: message", never
// both. Synchronous; used at start, by --check and by a reload, off the
// request path. Configuration errors are returned, never thrown.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/config/config.hpp"
#include "gateway/config/env.hpp"

namespace sluice {

struct ConfigResult {
  std::shared_ptr<const Config> config;  // null when errors is non-empty
  std::vector<std::string> errors;       // "file:line: key.path: message", in file order
  // Valid but probably not what was meant, in the same form as errors.
  std::vector<std::string> warnings;
};

// Parses and validates YAML text; `source` names the file in messages. Scalar
// values have ${VAR} and ${VAR:-default} expanded from `env` (see
// gateway/config/env.hpp); the first overload uses the process environment.
ConfigResult parse_config(std::string_view yaml_text, std::string_view source);
ConfigResult parse_config(std::string_view yaml_text, std::string_view source,
                          const EnvLookup& env);
// Reads and parses a file; a file that cannot be read is one error.
ConfigResult load_config_file(const std::string& path);

}  // namespace sluice
