// The retry rule: which failed upstream attempts are made again, and how.
#include <catch2/catch.hpp>

#include "upstream/exchange/retry_rule.hpp"

using namespace sluice;

namespace retry_rule_test {

FailedAttempt failed_connect(bool idempotent, std::size_t tried) {
  FailedAttempt a;
  a.stage = FailedAttempt::Stage::kConnect;
  a.idempotent = idempotent;
  a.servers_tried = tried;
  return a;
}

// A GET without a body that found its pooled connection closed by the server.
FailedAttempt stale_pooled_connection() {
  FailedAttempt a;
  a.stage = FailedAttempt::Stage::kExchange;
  a.idempotent = true;
  a.servers_tried = 1;
  a.closed_by_server = true;
  a.pooled_connection = true;
  a.body_empty = true;
  return a;
}

TEST_CASE("retry rule: a failed connect goes to a second server, idempotent requests only",
          "[retry_rule]") {
  CHECK(retry_rule(failed_connect(true, 1)) == Retry::kNextServer);
  CHECK(retry_rule(failed_connect(true, 2)) == Retry::kNo);  // two servers at most
  CHECK(retry_rule(failed_connect(false, 1)) == Retry::kNo);
  FailedAttempt timed_out = failed_connect(true, 1);
  timed_out.timed_out = true;  // a connect timeout sent nothing either
  CHECK(retry_rule(timed_out) == Retry::kNextServer);
}

TEST_CASE("retry rule: a stale pooled connection is replaced by a fresh one, once",
          "[retry_rule]") {
  CHECK(retry_rule(stale_pooled_connection()) == Retry::kFreshConnection);

  FailedAttempt a = stale_pooled_connection();
  SECTION("already sent again on a fresh connection") { a.retried_on_fresh = true; }
  SECTION("a connection just made, not from the pool") { a.pooled_connection = false; }
  SECTION("the request had a body") { a.body_empty = false; }
  SECTION("not idempotent (POST)") { a.idempotent = false; }
  SECTION("a response byte had come") { a.response_started = true; }
  SECTION("timed out rather than closed") { a.timed_out = true; }
  SECTION("another error than a close (e.g. a malformed response)") {
    a.closed_by_server = false;
  }
  CHECK(retry_rule(a) == Retry::kNo);
}

TEST_CASE("retry rule: a refused HTTP/2 stream goes again, whatever its method, a few times",
          "[retry_rule]") {
  FailedAttempt a;
  a.stage = FailedAttempt::Stage::kExchange;
  a.servers_tried = 1;
  a.refused = true;           // REFUSED_STREAM, or a GOAWAY below it: never processed
  a.idempotent = false;       // a POST too
  a.retried_on_fresh = true;  // whatever else happened to it before
  for (std::size_t before = 0; before < kMaxRefusedRetries; ++before) {
    a.refused_before = before;
    CHECK(retry_rule(a) == Retry::kAnotherStream);
  }
  a.refused_before = kMaxRefusedRetries;
  CHECK(retry_rule(a) == Retry::kNo);
}

}  // namespace retry_rule_test
