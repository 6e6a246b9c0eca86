// Who a request is, resolved once per request: the API key it carries (read
// by api_key.hpp), whether a consumer holds that key, and the plan that picks
// the limits' parameters. Exemptions, key refusals and the bucket descriptors
// all read this one value; none reads the API key header again. Pure, no I/O.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "gateway/config/config.hpp"
#include "middleware/ratelimit/request_view.hpp"

namespace sluice {

struct Identity {
  // The key the api_key key parts use: a consumer's key, or any well-formed
  // key when no consumers are listed; nullopt when missing (absent, too long,
  // malformed or held by no consumer). Views the request.
  std::optional<std::string_view> key;
  // The consumer's plan, else api_keys.default_plan (views the config).
  std::string_view plan;
  bool consumer = false;   // a listed consumer holds `key`
  bool malformed = false;  // a Bearer credential of the wrong form (see extract_api_key)
  std::size_t key_lines = 0;  // lines of api_keys.header in the request
};

// Reads the request's API key once and looks it up among api_keys.consumers.
Identity identify(const RequestView& request, const ApiKeysConfig& api_keys);

}  // namespace sluice
