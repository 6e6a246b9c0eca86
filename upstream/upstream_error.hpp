// The ways the upstream leg of an exchange fails before the client has any of
// the response, and the one place that chooses the status the client then gets:
// 503 when Sluice did not try (no server, connection cap), 504 when the
// upstream was too slow, 502 when it answered badly or not at all. Beside it,
// the outcome of each upstream attempt as the metrics name it.
#pragma once

#include <cstddef>

#include <string_view>

namespace sluice {

enum class UpstreamError {
  kNoServer,                   // every server of the upstream is in cool-down
  kNoHealthyServer,            // every server fails its health checks or is in cool-down
  kConnectionLimit,            // no connection freed up within connect_timeout
  kConnectFailed,              // refused, reset or unresolvable
  kConnectTimedOut,            // no connection within connect_timeout
  kTlsFailed,                  // the TLS handshake failed (verification, protocol)
  kConnectionFailed,           // the connection broke while the request or response head went
  kResponseTimedOut,           // no response byte within response_timeout
  kUnsupportedTransferCoding,  // a response coding Sluice cannot re-frame
  kMalformedResponseBody,      // the body broke before the response head was sent
  kUnexpectedUpgrade,          // 101 to a request that asked for no (or another) upgrade
};

// 502, 503 or 504.
unsigned status_for(UpstreamError error);

// How one attempt at an upstream went (sluice_upstream_requests_total's
// `outcome`): a response head came (ok), or why none did.
enum class UpstreamOutcome {
  kOk,               // a response head arrived (whatever its status)
  kTimeout,          // no connection, or no response, in time
  kReset,            // the connection broke while the request or response head went
  kConnectError,     // refused, reset or unresolvable
  kTlsError,         // the TLS handshake failed (a certificate not verified, a protocol error)
  kProtocolError,    // an answer Sluice cannot relay (transfer coding, unasked 101)
  kUnhealthy,        // every server fails its health checks
  kConnectionLimit,  // no connection freed up within connect_timeout
};
inline constexpr std::size_t kUpstreamOutcomeCount =
    static_cast<std::size_t>(UpstreamOutcome::kConnectionLimit) + 1;

// Its label: "ok", "timeout", "reset", "connect_error", "tls_error",
// "protocol_error", "unhealthy" or "connection_limit".
std::string_view outcome_label(UpstreamOutcome outcome);

// The message of the local reply.
std::string_view message_for(UpstreamError error);

// The error of a failed connect, and of an exchange that failed after it.
inline UpstreamError connect_error(bool timed_out) {
  return timed_out ? UpstreamError::kConnectTimedOut : UpstreamError::kConnectFailed;
}
inline UpstreamError exchange_error(bool timed_out) {
  return timed_out ? UpstreamError::kResponseTimedOut : UpstreamError::kConnectionFailed;
}

}  // namespace sluice
