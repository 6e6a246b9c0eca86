#include "gateway/config/env.hpp"

#include <cstdlib>

namespace sluice {
namespace {

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}

bool is_valid_name(std::string_view name) {
  if (name.empty() || !is_name_start(name.front())) return false;
  for (char c : name) {
    if (!is_name_char(c)) return false;
  }
  return true;
}

}  // namespace

EnvLookup process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  };
}

Expansion expand_env(std::string_view value, const EnvLookup& env) {
  Expansion out;
  std::size_t i = 0;
  while (i < value.size()) {
    // "$${" is a literal "${".
    if (value.substr(i).starts_with("$${")) {
      out.text += "${";
      i += 3;
      continue;
    }
    if (!value.substr(i).starts_with("${")) {
      out.text += value[i++];
      continue;
    }
    const auto close = value.find('}', i + 2);
    if (close == std::string_view::npos) {
      out.error = "unterminated \"${\" (write \"$${\" for a literal \"${\")";
      return out;
    }
    const auto inside = value.substr(i + 2, close - i - 2);
    const auto dash = inside.find(":-");
    const auto name = inside.substr(0, dash);
    if (!is_valid_name(name)) {
      out.error = "invalid environment variable name \"" + std::string(name) +
                  "\" (use letters, digits and \"_\"; write \"$${\" for a literal \"${\")";
      return out;
    }
    const auto found = env(name);
    out.from_environment = true;
    if (dash == std::string_view::npos) {
      if (!found) {
        out.error = "environment variable " + std::string(name) + " is not set";
        return out;
      }
      out.text += *found;
    } else if (found && !found->empty()) {
      out.text += *found;
    } else {
      out.text += inside.substr(dash + 2);
    }
    i = close + 1;
  }
  return out;
}

}  // namespace sluice
