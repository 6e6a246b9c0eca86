#include <catch2/catch.hpp>

#include "gateway/session/grpc_reply.hpp"

using namespace sluice;

TEST_CASE("gRPC requests are known by their content type", "[grpc]") {
  CHECK(is_grpc_content_type("application/grpc"));
  CHECK(is_grpc_content_type("application/grpc+proto"));
  CHECK(is_grpc_content_type("Application/GRPC;charset=utf-8"));
  CHECK_FALSE(is_grpc_content_type("application/grpc-web"));
  CHECK_FALSE(is_grpc_content_type("application/grpcx"));
  CHECK_FALSE(is_grpc_content_type("application/json"));
  CHECK_FALSE(is_grpc_content_type(""));
}

TEST_CASE("Sluice's statuses map to gRPC status codes", "[grpc]") {
  CHECK(grpc_status_for(429) == 8);   // RESOURCE_EXHAUSTED: limited
  CHECK(grpc_status_for(503) == 14);  // UNAVAILABLE: fail-closed, no healthy server
  CHECK(grpc_status_for(502) == 14);
  CHECK(grpc_status_for(504) == 4);   // DEADLINE_EXCEEDED
  CHECK(grpc_status_for(408) == 4);
  CHECK(grpc_status_for(401) == 16);
  CHECK(grpc_status_for(403) == 7);
  CHECK(grpc_status_for(404) == 12);  // UNIMPLEMENTED: no route
  CHECK(grpc_status_for(413) == 8);
  CHECK(grpc_status_for(431) == 8);
  CHECK(grpc_status_for(400) == 13);  // INTERNAL, as gRPC maps a 400
  CHECK(grpc_status_for(500) == 2);   // UNKNOWN
}

TEST_CASE("grpc-message is percent-encoded", "[grpc]") {
  CHECK(grpc_percent_encode("Too Many Requests") == "Too Many Requests");
  CHECK(grpc_percent_encode("100% sure") == "100%25 sure");
  CHECK(grpc_percent_encode("caf\xc3\xa9\n") == "caf%C3%A9%0A");
}

TEST_CASE("grpc-timeout values are read as milliseconds, rounded up", "[grpc]") {
  using std::chrono::milliseconds;
  CHECK(parse_grpc_timeout("1S") == milliseconds(1000));
  CHECK(parse_grpc_timeout("300m") == milliseconds(300));
  CHECK(parse_grpc_timeout("2M") == milliseconds(120000));
  CHECK(parse_grpc_timeout("1H") == milliseconds(3600000));
  CHECK(parse_grpc_timeout("1500u") == milliseconds(2));
  CHECK(parse_grpc_timeout("1n") == milliseconds(1));
  CHECK(parse_grpc_timeout("99999999H") == milliseconds(99999999LL * 3600000));
  CHECK(parse_grpc_timeout("0m") == milliseconds(0));
  CHECK_FALSE(parse_grpc_timeout("123456789S"));  // nine digits
  CHECK_FALSE(parse_grpc_timeout("S"));
  CHECK_FALSE(parse_grpc_timeout("10"));
  CHECK_FALSE(parse_grpc_timeout("10s"));
  CHECK_FALSE(parse_grpc_timeout("-1S"));
  CHECK_FALSE(parse_grpc_timeout(""));
}
