// Who an Envoy rate-limit call is for, where its descriptor carries an API key
// (an entry an api_key node matched): the key is read as a request's
// api_keys.header would be (a Bearer credential when that header is
// Authorization) and resolved as the data plane resolves it, the YAML
// consumers first, then the consumer store through the worker's resolver
// (its cache at once, else one lookup shared with every worker). Then:
//
//   - a consumer: its buckets are the consumer's (whichever of its keys is
//     sent), sized by its plan and, from the store, its own overrides;
//   - a disabled consumer, or a key no consumer holds with
//     api_keys.unknown_key: reject: refused (the descriptor is over its limit);
//   - a key no consumer holds otherwise, or a malformed credential: missing,
//     its buckets shared by every such key, at api_keys.default_plan;
//   - with no consumers and no store: the key itself, at the default plan.
// A plan exemptions.plans lists is never limited. The store not answering is
// what it is on the data plane: a key not cached is unknown.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "middleware/ratelimit/identity.hpp"

namespace sluice {

struct BucketWorker;
struct Config;

struct RlsCaller {
  enum class Verdict { kLimited, kExempt, kUnknownKey, kDisabled };
  Identity identity;  // views the call's request and configuration
  Verdict verdict = Verdict::kLimited;
  // What stands for the key in its descriptor's buckets: the consumer's
  // bucket value, the key with no consumers at all, empty for a missing key.
  std::string bucket_value;
  std::string label;  // the consumer (or the key's fingerprint) in denials
  bool store_failed = false;  // the store was asked and did not answer
};

using RlsCallersDone = std::function<void(std::vector<RlsCaller>)>;

// Resolves `keys` (views that outlive the call) under `config` (the call's)
// on the worker's thread; `done` gets one caller per key, in order, maybe
// before this returns.
void resolve_rls_callers(const BucketWorker& worker, std::shared_ptr<const Config> config,
                         std::vector<std::string_view> keys, RlsCallersDone done);

// The caller of `key` as the configuration alone says (no store).
RlsCaller rls_caller(const Config& config, std::string_view key);

// The caller's verdict and bucket value, once its identity is final.
void settle_rls_caller(const Config& config, RlsCaller& caller);

}  // namespace sluice
