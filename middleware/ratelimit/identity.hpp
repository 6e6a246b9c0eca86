// Who a request is, resolved once per request: the API key it carries (read
// by api_key.hpp), the consumer holding that key (a YAML consumer, or one of
// the consumer store, looked up by the caller and applied here), and the plan
// that picks the limits' parameters. Exemptions, key refusals, the bucket
// descriptors and the upstream's consumer headers all read this one value;
// none reads the API key header again. Pure, no I/O.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>

#include "gateway/config/config.hpp"
#include "gateway/middleware.hpp"
#include "middleware/ratelimit/consumers/consumer.hpp"
#include "middleware/ratelimit/request_view.hpp"

namespace sluice {

struct Identity {
  // What the api_key key parts use: a YAML consumer's key, a store consumer's
  // bucket value, or any well-formed key when neither consumers nor the store
  // are configured; nullopt when missing (absent, too long, malformed or held
  // by no consumer). Views the request or `stored`.
  std::optional<std::string_view> key;
  // The consumer's plan, else api_keys.default_plan (views the config or `stored`).
  std::string_view plan;
  bool consumer = false;   // a consumer holds the key
  bool malformed = false;  // a Bearer credential of the wrong form (see extract_api_key)
  std::size_t key_lines = 0;  // lines of api_keys.header in the request
  // The well-formed key the request carries, whoever holds it (views the request).
  std::optional<std::string_view> presented;
  std::string_view consumer_id;  // empty: none (or a YAML consumer without an id)
  std::string_view org;          // the consumer's organisation; empty: none
  std::shared_ptr<const StoredConsumer> stored;  // a consumer of the store
  bool disabled = false;                         // the store consumer is disabled
};

// Reads the request's API key once and looks it up among api_keys.consumers.
Identity identify(const RequestView& request, const ApiKeysConfig& api_keys);

// Whether the consumer store must be asked about this request's key: the
// store is on, the key is well-formed and no YAML consumer holds it.
bool needs_store(const Identity& identity, const ApiKeysConfig& api_keys);

// The store's answer applied: the consumer (null: none holds the key).
void apply_store_consumer(Identity& identity, std::shared_ptr<const StoredConsumer> consumer);

// A verified token's consumer and plan, over what the API key said (the
// token wins). Nothing when the caller is not verified.
void apply_verified_caller(Identity& identity, const VerifiedCaller& caller);

// Whether a key was presented that no consumer holds, where consumers decide
// who is known (YAML consumers listed, or the store on).
bool unknown_key(const Identity& identity, const ApiKeysConfig& api_keys);

// The parameters of `limit` for this request: its plan's, and a store
// consumer's override of that limit on top.
BucketParams identity_params(const LimitConfig& limit, const Identity& identity);

}  // namespace sluice
