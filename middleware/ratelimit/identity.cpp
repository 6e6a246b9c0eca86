#include "middleware/ratelimit/identity.hpp"

#include "middleware/ratelimit/api_key.hpp"

namespace sluice {

Identity identify(const RequestView& request, const ApiKeysConfig& api_keys) {
  const ApiKey api_key = extract_api_key(request, api_keys);
  Identity identity;
  identity.key = api_key.key;
  identity.plan = api_key.plan;
  identity.consumer = api_key.key && !api_keys.consumers.empty();
  identity.malformed = api_key.malformed;
  identity.key_lines = count_header(request, api_keys.header);
  return identity;
}

}  // namespace sluice
