// The one place that maps an upstream failure to 502, 503 or 504.
#include <catch2/catch.hpp>

#include "upstream/upstream_error.hpp"

using namespace sluice;

TEST_CASE("upstream failures map to 502, 503 and 504", "[upstream_error]") {
  CHECK(status_for(UpstreamError::kNoServer) == 503);
  CHECK(status_for(UpstreamError::kNoHealthyServer) == 503);
  CHECK(status_for(UpstreamError::kConnectionLimit) == 503);
  CHECK(status_for(UpstreamError::kConnectTimedOut) == 504);
  CHECK(status_for(UpstreamError::kResponseTimedOut) == 504);
  CHECK(status_for(UpstreamError::kConnectFailed) == 502);
  CHECK(status_for(UpstreamError::kConnectionFailed) == 502);
  CHECK(status_for(UpstreamError::kTlsFailed) == 502);
  CHECK(status_for(UpstreamError::kUnsupportedTransferCoding) == 502);
  CHECK(status_for(UpstreamError::kMalformedResponseBody) == 502);
}

TEST_CASE("upstream outcomes have the labels the metrics document", "[upstream_error]") {
  CHECK(outcome_label(UpstreamOutcome::kOk) == "ok");
  CHECK(outcome_label(UpstreamOutcome::kTimeout) == "timeout");
  CHECK(outcome_label(UpstreamOutcome::kReset) == "reset");
  CHECK(outcome_label(UpstreamOutcome::kConnectError) == "connect_error");
  CHECK(outcome_label(UpstreamOutcome::kTlsError) == "tls_error");
  CHECK(outcome_label(UpstreamOutcome::kProtocolError) == "protocol_error");
  CHECK(outcome_label(UpstreamOutcome::kUnhealthy) == "unhealthy");
  CHECK(outcome_label(UpstreamOutcome::kConnectionLimit) == "connection_limit");
}

TEST_CASE("upstream failure messages", "[upstream_error]") {
  CHECK(message_for(UpstreamError::kTlsFailed) == "upstream TLS handshake failed");
  CHECK(message_for(UpstreamError::kNoServer) == "no upstream server available (all in cool-down)");
  CHECK(message_for(UpstreamError::kNoHealthyServer) ==
        "no healthy upstream server (failing health checks)");
  CHECK(message_for(UpstreamError::kConnectionLimit) == "upstream connection limit reached");
  CHECK(message_for(connect_error(false)) == "upstream connect failed");
  CHECK(message_for(connect_error(true)) == "upstream connect failed");
  CHECK(status_for(connect_error(true)) == 504);
  CHECK(message_for(exchange_error(false)) == "upstream connection failed");
  CHECK(message_for(exchange_error(true)) == "upstream response timed out");
  CHECK(message_for(UpstreamError::kUnsupportedTransferCoding) ==
        "upstream response has an unsupported transfer coding");
  CHECK(message_for(UpstreamError::kMalformedResponseBody) ==
        "upstream response body is malformed");
}
