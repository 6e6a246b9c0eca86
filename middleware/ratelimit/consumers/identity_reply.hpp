// What a request gets when its consumer decides it: 401 for an API key no
// consumer holds (with api_keys.unknown_key: reject), 403 for a disabled
// consumer; both problem+json, before any limit is asked. Pure.
#pragma once

#include "gateway/config/config.hpp"
#include "gateway/middleware.hpp"

namespace sluice {

// 401 with WWW-Authenticate: the Bearer scheme when keys come in
// Authorization, else an ApiKey challenge naming the header.
LocalReply unknown_key_reply(const ApiKeysConfig& api_keys);

// 403: the consumer holding the key is disabled.
LocalReply disabled_consumer_reply();

}  // namespace sluice
