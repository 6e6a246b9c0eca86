// A route's retry policy (routes[].retry) and what it decides, pure: which
// failures of an attempt are retried, how many attempts a request gets, and
// how long it waits before the next one (exponential, fully jittered, as
// Envoy's and AWS's backoff). Whether the request may go again at all (its
// method, its body kept) and the upstream's budget are asked beside it
// (retry_budget.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sluice {

// Why an attempt failed, as the policy's `on` list names it.
enum class RetryCause : std::uint8_t {
  kConnectFailure,   // connect_failure: refused, unreachable, TLS handshake failed
  kReset,            // reset: the connection broke before a response head
  kTimeout,          // the per-try timeout passed before a response head
  kStatus502,        // 502
  kStatus503,        // 503
  kStatus504,        // 504
  kGrpcUnavailable,  // unavailable: a gRPC response whose head says grpc-status 14
};

struct RetryPolicy {
  unsigned attempts = 2;  // tries in all, the first included
  // The causes retried: a bit per RetryCause.
  std::uint32_t on = 0;
  std::chrono::milliseconds per_try_timeout{0};  // 0: the exchange's own timeouts
  std::chrono::milliseconds backoff_base{25};
  std::chrono::milliseconds backoff_max{250};
  bool non_idempotent = false;  // POST and PATCH too (retry_non_idempotent)
  // A request body up to this is kept while it goes, so that it can go again;
  // a longer one is not kept, and its request is not retried once sent.
  std::size_t max_replay_bytes = 64 * 1024;

  void allow(RetryCause cause) { on |= 1u << static_cast<unsigned>(cause); }
  bool retries(RetryCause cause) const { return (on >> static_cast<unsigned>(cause)) & 1u; }
  bool operator==(const RetryPolicy&) const = default;
};

// How long to wait before retry number `retry` (1: the first retry): a
// uniform draw in [0, min(backoff_max, backoff_base * 2^(retry-1))], from
// `draw`, a uniformly random 64-bit value.
std::chrono::milliseconds retry_backoff(const RetryPolicy& policy, unsigned retry,
                                        std::uint64_t draw);

// The cause of an answered attempt's status (none: not a retry cause), with
// the gRPC status its head carries when it is a gRPC response (-1: none).
bool status_cause(unsigned status, int grpc_status, RetryCause& cause);

}  // namespace sluice
