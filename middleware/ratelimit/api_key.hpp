// The API key and plan a request carries, read from the configured header
// (a Bearer credential when that header is Authorization). Pure functions,
// no I/O.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "gateway/config/config.hpp"
#include "gateway/config/text.hpp"
#include "middleware/ratelimit/request_view.hpp"

namespace sluice {

// API keys longer than this count as missing (the bound of every API key).
inline constexpr std::size_t kMaxApiKeyBytes = config::kMaxApiKeyBytes;

struct ApiKey {
  std::optional<std::string_view> key;  // nullopt: missing (absent, too long, or not a consumer)
  std::string_view plan;                // the consumer's plan, else default_plan (views `config`)
  bool malformed = false;  // a Bearer credential not of the form below (key is then nullopt)
  // The key as the request carries it when well-formed, whoever holds it
  // (what the consumer store is asked about).
  std::optional<std::string_view> presented;
  const Consumer* consumer = nullptr;  // the YAML consumer holding the key
};

// Whether the API key is read as a Bearer credential: api_keys.header is
// "Authorization" (any case). Only then can a request's key be malformed.
bool reads_bearer_credential(const ApiKeysConfig& config);

// Reads the API key from the configured header (the first line of it), without
// surrounding whitespace. When that header is "Authorization" (any case), the
// value must be exactly
//   OWS "Bearer" 1*SP token68 OWS
//   token68 = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
// with the scheme case-insensitive, and the token68 is the key. A value whose
// first word (up to the first space or tab) is not "Bearer" (another scheme
// such as "Basic", or none) has no key; a value whose first word is "Bearer"
// but that is not of that form ("Bearer", "Bearer tok,", "Bearer tok extra", a
// tab after the scheme) is malformed: no key and `malformed` set. A key longer
// than kMaxApiKeyBytes is missing, not malformed. When consumers are listed,
// or the consumer store is on, a key no listed consumer holds counts as missing
// (`presented` still holds it).
ApiKey extract_api_key(const RequestView& request, const ApiKeysConfig& config);

}  // namespace sluice
