#include "middleware/ratelimit/identity.hpp"

#include "middleware/ratelimit/api_key.hpp"

namespace sluice {

Identity identify(const RequestView& request, const ApiKeysConfig& api_keys) {
  const ApiKey api_key = extract_api_key(request, api_keys);
  Identity identity;
  identity.key = api_key.key;
  identity.plan = api_key.plan;
  identity.consumer = api_key.consumer != nullptr;
  identity.malformed = api_key.malformed;
  identity.key_lines = count_header(request, api_keys.header);
  identity.presented = api_key.presented;
  if (api_key.consumer) {
    identity.consumer_id = api_key.consumer->id;
    identity.org = api_key.consumer->org;
  }
  return identity;
}

bool needs_store(const Identity& identity, const ApiKeysConfig& api_keys) {
  return api_keys.store == ApiKeysConfig::Store::kRedis && identity.presented &&
         !identity.consumer;
}

void apply_store_consumer(Identity& identity, std::shared_ptr<const StoredConsumer> consumer) {
  if (!consumer) return;
  identity.stored = std::move(consumer);
  identity.key = identity.stored->bucket_value;
  identity.plan = identity.stored->plan;
  identity.consumer = true;
  identity.consumer_id = identity.stored->id;
  identity.org = identity.stored->org;
  identity.disabled = identity.stored->disabled;
}

void apply_verified_caller(Identity& identity, const VerifiedCaller& caller) {
  if (!caller.verified) return;
  if (!caller.consumer.empty()) {
    identity.consumer = true;
    identity.consumer_id = caller.consumer;
  }
  if (!caller.plan.empty()) identity.plan = caller.plan;
  if (!caller.org.empty()) identity.org = caller.org;
}

bool unknown_key(const Identity& identity, const ApiKeysConfig& api_keys) {
  const bool consumers_decide =
      !api_keys.consumers.empty() || api_keys.store == ApiKeysConfig::Store::kRedis;
  return consumers_decide && identity.presented && !identity.consumer;
}

BucketParams identity_params(const LimitConfig& limit, const Identity& identity) {
  if (identity.stored) return consumer_params(limit, *identity.stored);
  return limit.for_plan(identity.plan);
}

}  // namespace sluice
