// Sluice's own replies to gRPC calls: a gRPC client reads a call's outcome
// from grpc-status, not from the HTTP status, so a reply Sluice makes itself
// (a limit, a refusal, an upstream that failed) goes to it as HTTP 200 with
// grpc-status and grpc-message (a Trailers-Only response). Pure functions.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

// content-type application/grpc, application/grpc+proto, application/grpc;...
bool is_grpc_content_type(std::string_view content_type);

// The gRPC status code for the HTTP status of a reply Sluice makes: 429 is
// RESOURCE_EXHAUSTED (8), 502 and 503 UNAVAILABLE (14), 504 and 408
// DEADLINE_EXCEEDED (4), 401 UNAUTHENTICATED (16), 403 PERMISSION_DENIED
// (7), 404 and 405 UNIMPLEMENTED (12), 413 and 431 RESOURCE_EXHAUSTED,
// other 4xx INTERNAL (13, as gRPC maps a 400), anything else UNKNOWN (2).
unsigned grpc_status_for(unsigned http_status);

// A grpc-timeout value (1 to 8 digits and a unit: H, M, S, m, u, n) as
// milliseconds, rounded up (a timeout under a millisecond is one); nothing
// when the value is not one.
std::optional<std::chrono::milliseconds> parse_grpc_timeout(std::string_view value);

// grpc-message's encoding: bytes outside printable ASCII, and '%', as %XX.
std::string grpc_percent_encode(std::string_view message);

}  // namespace sluice
