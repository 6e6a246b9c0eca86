#include "middleware/ratelimit/api_key.hpp"

#include <string>

#include "common/ascii.hpp"

namespace sluice {
namespace {

constexpr std::string_view kBearer = "bearer";

using ascii::iequals;
using ascii::trim;

// token68 = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
bool is_token68(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && (ascii::is_alpha(s[i]) || ascii::is_digit(s[i]) ||
                          std::string_view("-._~+/").find(s[i]) != std::string_view::npos)) {
    ++i;
  }
  if (i == 0) return false;
  while (i < s.size() && s[i] == '=') ++i;
  return i == s.size();
}

struct BearerCredential {
  bool is_bearer = false;                 // the first word is the Bearer scheme
  std::optional<std::string_view> token;  // set when the whole value is well-formed
};

// Parses OWS "Bearer" 1*SP token68 OWS (scheme case-insensitive).
BearerCredential parse_bearer(std::string_view value) {
  value = trim(value);
  const std::size_t scheme_end = value.find_first_of(" \t");
  if (!iequals(value.substr(0, scheme_end), kBearer)) return {};
  BearerCredential result;
  result.is_bearer = true;
  if (scheme_end == std::string_view::npos) return result;  // no token
  const std::string_view rest = value.substr(scheme_end);
  // `rest` ends with a non-whitespace character (trimmed), so a token follows.
  const std::size_t token_start = rest.find_first_not_of(' ');
  if (token_start == 0) return result;  // a tab after the scheme
  const std::string_view token = rest.substr(token_start);
  if (is_token68(token)) result.token = token;
  return result;
}

const Consumer* find_consumer(const ApiKeysConfig& config, std::string_view key) {
  if (!config.consumer_index.empty()) {
    auto it = config.consumer_index.find(key);
    return it == config.consumer_index.end() ? nullptr : &config.consumers[it->second];
  }
  for (const Consumer& consumer : config.consumers) {
    if (consumer.key == key) return &consumer;
  }
  return nullptr;
}

}  // namespace

bool reads_bearer_credential(const ApiKeysConfig& config) {
  return iequals(config.header, "Authorization");
}

ApiKey extract_api_key(const RequestView& request, const ApiKeysConfig& config) {
  ApiKey result;
  result.plan = config.default_plan;
  std::optional<std::string_view> value = lookup_header(request, config.header);
  if (!value) return result;
  std::optional<std::string_view> key;
  if (reads_bearer_credential(config)) {
    const BearerCredential bearer = parse_bearer(*value);
    result.malformed = bearer.is_bearer && !bearer.token;
    key = bearer.token;
  } else {
    key = trim(*value);
  }
  if (!key || key->empty() || key->size() > kMaxApiKeyBytes) return result;
  result.presented = key;
  if (const Consumer* consumer = find_consumer(config, *key)) {
    result.key = key;
    result.plan = consumer->plan;
    result.consumer = consumer;
  } else if (config.consumers.empty() && config.store == ApiKeysConfig::Store::kNone) {
    result.key = key;
  }
  return result;
}

}  // namespace sluice
