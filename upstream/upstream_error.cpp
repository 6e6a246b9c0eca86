#include "upstream/upstream_error.hpp"

namespace sluice {

unsigned status_for(UpstreamError error) {
  switch (error) {
    case UpstreamError::kNoServer:
    case UpstreamError::kNoHealthyServer:
    case UpstreamError::kConnectionLimit:
      return 503;
    case UpstreamError::kConnectTimedOut:
    case UpstreamError::kResponseTimedOut:
      return 504;
    case UpstreamError::kConnectFailed:
    case UpstreamError::kTlsFailed:
    case UpstreamError::kConnectionFailed:
    case UpstreamError::kUnsupportedTransferCoding:
    case UpstreamError::kMalformedResponseBody:
    case UpstreamError::kUnexpectedUpgrade:
      return 502;
  }
  return 502;
}

std::string_view outcome_label(UpstreamOutcome outcome) {
  switch (outcome) {
    case UpstreamOutcome::kOk:
      return "ok";
    case UpstreamOutcome::kTimeout:
      return "timeout";
    case UpstreamOutcome::kReset:
      return "reset";
    case UpstreamOutcome::kConnectError:
      return "connect_error";
    case UpstreamOutcome::kTlsError:
      return "tls_error";
    case UpstreamOutcome::kProtocolError:
      return "protocol_error";
    case UpstreamOutcome::kUnhealthy:
      return "unhealthy";
    case UpstreamOutcome::kConnectionLimit:
      return "connection_limit";
  }
  return "reset";
}

std::string_view message_for(UpstreamError error) {
  switch (error) {
    case UpstreamError::kNoServer:
      return "no upstream server available (all in cool-down)";
    case UpstreamError::kNoHealthyServer:
      return "no healthy upstream server (failing health checks)";
    case UpstreamError::kConnectionLimit:
      return "upstream connection limit reached";
    case UpstreamError::kConnectFailed:
    case UpstreamError::kConnectTimedOut:
      return "upstream connect failed";
    case UpstreamError::kTlsFailed:
      return "upstream TLS handshake failed";
    case UpstreamError::kConnectionFailed:
      return "upstream connection failed";
    case UpstreamError::kResponseTimedOut:
      return "upstream response timed out";
    case UpstreamError::kUnsupportedTransferCoding:
      return "upstream response has an unsupported transfer coding";
    case UpstreamError::kMalformedResponseBody:
      return "upstream response body is malformed";
    case UpstreamError::kUnexpectedUpgrade:
      return "upstream switched protocols without being asked to";
  }
  return "upstream connection failed";
}

}  // namespace sluice
