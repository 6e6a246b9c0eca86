// One connection to the Envoy rate-limit service: HTTP/2 (h2c with prior
// knowledge, or TLS with ALPN h2) carrying unary gRPC calls of
// /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, each decided
// on this worker (rls_call.hpp) and answered with its RateLimitResponse and
// grpc-status 0, or a Trailers-Only error:
//   UNIMPLEMENTED        another method, or a compressed message
//   INVALID_ARGUMENT     not gRPC, not one message, or a bad RateLimitRequest
//   RESOURCE_EXHAUSTED   a message over rls.max_message_bytes (1 MiB), or the
//                        connection's 4 MiB of buffered messages taken
//   DEADLINE_EXCEEDED    the call's grpc-timeout passed before the decision
//   UNAVAILABLE          the worker is stopping, or Redis failed (on_redis_failure: error)
// At most 128 calls at once per connection (SETTINGS_MAX_CONCURRENT_STREAMS);
// at most rls.max_connections connections in the process (more are closed
// at once); a connection without a call for server.idle_timeout_ms, or one
// that sends nothing that long, gets GOAWAY and is closed; a drain sends
// GOAWAY, lets the calls under way finish, then closes.
#pragma once

#include <memory>

#include "gateway/front_door.hpp"

namespace sluice {

struct BucketWorker;

// Serves `socket` (of the worker's io_context) on the worker's thread.
void serve_rls_connection(WorkerSocket socket, std::shared_ptr<const ServerTls> tls,
                          std::weak_ptr<BucketWorker> worker);

// The drain, on a worker's thread: GOAWAY on each of its connections.
void drain_rls_connections();

}  // namespace sluice
