// The state of one ShouldRateLimit call between its parse and its answer:
// each descriptor's match, caller and bucket, the decisions and releases
// sent for them, and what answers the call (respond, rls_reply.cpp).
// Internal to services/rls.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "gateway/config/rls_config.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"
#include "services/rls/rls_call.hpp"
#include "services/rls/rls_callers.hpp"
#include "services/rls/rls_matcher.hpp"

namespace sluice {
class DenialAudit;
class LocalLayer;
class MetricsShard;
}  // namespace sluice

namespace sluice::rls {

namespace pb = envoy::service::ratelimit::v3;

inline RlsReply refused(unsigned status, std::string message) {
  return {status, std::move(message), {}};
}

constexpr std::size_t kNoCaller = static_cast<std::size_t>(-1);

struct Planned {
  RlsMatch match;
  const LimitConfig* limit = nullptr;  // null: not decided (no rule, unlimited, replaced)
  std::shared_ptr<LimitConfig> override_limit;  // Envoy's limit override, when given
  double hits = 1;
  bool replaced = false;
  std::size_t caller = kNoCaller;  // its API key's caller (Call::callers)
  std::size_t group = 0;  // which decision call
  std::size_t slot = 0;   // its place in that call's descriptors
  // Its caller was refused (an unknown key with unknown_key: reject, a
  // disabled consumer): over its limit (a shadow rule: OK), nothing decided.
  bool refused = false;
  bool release_failed = false;  // a release not sent: its caller was not resolved
};

// One call, shared by the steps that complete it on the worker.
struct Call {
  std::shared_ptr<const Config> config;
  // The worker's limiter (gone when the worker stopped first), metrics and
  // denial stream.
  std::weak_ptr<LocalLayer> layer;
  MetricsShard* metrics = nullptr;
  std::shared_ptr<DenialAudit> audit;
  pb::RateLimitRequest request;  // what the matches and callers view
  const RlsDomain* domain = nullptr;
  std::string domain_label;
  std::vector<Planned> planned;
  std::vector<RlsCaller> callers;
  std::vector<std::vector<LimitDescriptor>> groups;
  std::vector<double> group_hits;
  std::vector<RateDecision> decisions;
  std::vector<BucketRefund> releases;
  std::error_code error;
  bool release_failed = false;  // the store did not take the releases
  // An enforced descriptor's caller was refused: the call is over its limit
  // and no bucket of it is decided (releases still go).
  bool refused = false;
  std::size_t pending = 0;
  RlsDone done;
};

// Answers the call from its decisions (or the store's failure), counts it,
// and notes its first denial.
void respond(Call& call);

}  // namespace sluice::rls
