// One ShouldRateLimit call, decided on a worker with that worker's limiter
// (the local layer in front of Redis), as the data plane decides a request:
// every descriptor a rule limits is decided in one atomic call (all or
// nothing: no bucket is debited unless every enforced one had its hits).
//
//   - A descriptor no rule limits (an unknown domain too) is OK, no limit.
//   - unlimited: OK, limit_remaining 2^32 - 1, and Redis is not asked.
//   - A rule another matched rule replaces (replaces: name) is OK, no limit.
//   - shadow_mode: decided and counted, always OK.
//   - hits: the descriptor's hits_addend, else the request's, else 1.
//     Descriptors of different hits are decided in one call per hits value.
//   - A limit the descriptor carries (Envoy's limit override) is a quota of
//     that size per unit, as envoyproxy/ratelimit honours it.
//   - Redis failing: rls.on_redis_failure (an UNAVAILABLE error, OK, or
//     OVER_LIMIT).
//   - An entry an api_key rule matched: the key's consumer (rls_callers.hpp)
//     names the buckets and sizes limit: rules by plan; a refused key makes
//     the call OVER_LIMIT with nothing decided.
//   - A concurrency rule: the last entry (the request's id) names a slot;
//     the same descriptor with a release entry after it gives it back.
// Bad calls get INVALID_ARGUMENT: not a RateLimitRequest, an empty domain,
// no descriptors, more than rls.max_descriptors, a descriptor without entries.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace sluice {

struct BucketWorker;

// The gRPC status codes the service answers with.
namespace grpc_code {
inline constexpr unsigned kInvalidArgument = 3;
inline constexpr unsigned kDeadlineExceeded = 4;
inline constexpr unsigned kResourceExhausted = 8;
inline constexpr unsigned kUnimplemented = 12;
inline constexpr unsigned kUnavailable = 14;
}  // namespace grpc_code

struct RlsReply {
  unsigned grpc_status = 0;  // 0 (OK): `message` is the RateLimitResponse
  std::string grpc_message;
  std::string message;
};

using RlsDone = std::function<void(RlsReply)>;

// On the worker's thread; `done` is called once, on it (maybe before this returns).
void decide_rls_call(const BucketWorker& worker, std::string_view request, RlsDone done);

}  // namespace sluice
