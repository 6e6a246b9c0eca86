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
