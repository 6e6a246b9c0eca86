#include "services/rls/rls_callers.hpp"

#include <algorithm>

#include "common/ascii.hpp"
#include "gateway/config/config.hpp"
#include "middleware/ratelimit/admin/bucket_endpoint.hpp"
#include "middleware/ratelimit/audit/decision_fields.hpp"
#include "middleware/ratelimit/consumers/consumer_resolver.hpp"
#include "middleware/ratelimit/request_view.hpp"

namespace sluice {
namespace {

struct Pending {
  std::vector<RlsCaller> callers;
  std::shared_ptr<const Config> config;
  std::size_t waiting = 0;
  RlsCallersDone done;

  void finish() {
    for (RlsCaller& caller : callers) settle_rls_caller(*config, caller);
    done(std::move(callers));
  }
};

}  // namespace

RlsCaller rls_caller(const Config& config, std::string_view key) {
  const ApiKeysConfig& api_keys = config.api_keys;
  // The key where a request carries it: the first (only) line of api_keys.header.
  RequestView view;
  view.header = [&](std::string_view name) -> std::optional<std::string_view> {
    if (ascii::iequals(name, api_keys.header)) return key;
    return std::nullopt;
  };
  RlsCaller caller;
  caller.identity = identify(view, api_keys);
  return caller;
}

void settle_rls_caller(const Config& config, RlsCaller& caller) {
  const ApiKeysConfig& api_keys = config.api_keys;
  const Identity& identity = caller.identity;
  caller.label = caller_label(identity, config.redis.key_secret);
  if (identity.disabled) {
    caller.verdict = RlsCaller::Verdict::kDisabled;
  } else if (api_keys.unknown_key == ApiKeysConfig::UnknownKey::kReject &&
             unknown_key(identity, api_keys)) {
    caller.verdict = RlsCaller::Verdict::kUnknownKey;
  } else if (identity.consumer && std::find(config.exemptions.plans.begin(),
                                            config.exemptions.plans.end(),
                                            identity.plan) != config.exemptions.plans.end()) {
    caller.verdict = RlsCaller::Verdict::kExempt;
  }
  caller.bucket_value = identity.key ? std::string(*identity.key) : std::string();
}

void resolve_rls_callers(const BucketWorker& worker, std::shared_ptr<const Config> config_ptr,
                         std::vector<std::string_view> keys, RlsCallersDone done) {
  auto pending = std::make_shared<Pending>();
  pending->config = std::move(config_ptr);
  const Config& config = *pending->config;
  pending->done = std::move(done);
  pending->callers.reserve(keys.size());
  for (std::string_view key : keys) pending->callers.push_back(rls_caller(config, key));
  // One more than the lookups under way, dropped once all are asked: the
  // last answer (or this function) finishes.
  pending->waiting = 1;
  for (std::size_t i = 0; i < pending->callers.size(); ++i) {
    Identity& identity = pending->callers[i].identity;
    if (!needs_store(identity, config.api_keys) || !worker.consumers) continue;
    if (auto cached = worker.consumers->cached(*identity.presented)) {
      apply_store_consumer(identity, std::move(cached->consumer));
      continue;
    }
    ++pending->waiting;
    worker.consumers->lookup(*identity.presented, [pending, i](Resolution found) {
      // An error is what it is on the data plane: the key is unknown.
      pending->callers[i].store_failed = found.error;
      apply_store_consumer(pending->callers[i].identity, std::move(found.consumer));
      if (--pending->waiting == 0) pending->finish();
    });
  }
  if (--pending->waiting == 0) pending->finish();
}

}  // namespace sluice
