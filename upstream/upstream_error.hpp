// The ways the upstream leg of an exchange fails before the client has any of
// the response, and the one place that chooses the status the client then gets:
// 503 when Sluice did not try (no server, connection cap), 504 when the
// upstream was too slow, 502 when it answered badly or not at all.
#pragma once

#include <string_view>

namespace sluice {

enum class UpstreamError {
  kNoServer,                   // every server of the upstream is in cool-down
  kNoHealthyServer,            // every server fails its health checks or is in cool-down
  kConnectionLimit,            // no connection freed up within connect_timeout
  kConnectFailed,              // refused, reset or unresolvable
  kConnectTimedOut,            // no connection within connect_timeout
  kConnectionFailed,           // the connection broke while the request or response head went
  kResponseTimedOut,           // no response byte within response_timeout
  kUnsupportedTransferCoding,  // a response coding Sluice cannot re-frame
  kMalformedResponseBody,      // the body broke before the response head was sent
  kUnexpectedUpgrade,          // 101 to a request that asked for no (or another) upgrade
};

// 502, 503 or 504.
unsigned status_for(UpstreamError error);

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
