// The Redis URL parser and its redaction for messages.
#include <catch2/catch.hpp>

#include "gateway/config/redis_url.hpp"

namespace sluice {

TEST_CASE("parse_redis_url", "[config]") {
  RedisConfig r;
  SECTION("plain, with every part") {
    REQUIRE_FALSE(parse_redis_url("redis://alice:p%3Ass@10.0.0.5:6380/3", r));
    CHECK_FALSE(r.tls);
    CHECK(r.host == "10.0.0.5");
    CHECK(r.port == 6380);
    CHECK(r.user == "alice");
    CHECK(r.password == "p:ss");
    CHECK(r.db == 3);
  }
  SECTION("defaults: port 6379, db 0, no auth") {
    REQUIRE_FALSE(parse_redis_url("redis://localhost", r));
    CHECK(r.host == "localhost");
    CHECK(r.port == 6379);
    CHECK(r.db == 0);
    CHECK(r.user.empty());
    CHECK(r.password.empty());
    REQUIRE_FALSE(parse_redis_url("redis://localhost:7000/", r));
    CHECK(r.port == 7000);
    CHECK(r.db == 0);
  }
  SECTION("a lone userinfo word is the password; :password has no user") {
    REQUIRE_FALSE(parse_redis_url("redis://secret@h:1", r));
    CHECK(r.user.empty());
    CHECK(r.password == "secret");
    REQUIRE_FALSE(parse_redis_url("redis://:secret@h:1", r));
    CHECK(r.user.empty());
    CHECK(r.password == "secret");
  }
  SECTION("rediss and IPv6") {
    REQUIRE_FALSE(parse_redis_url("rediss://[::1]:6390/1", r));
    CHECK(r.tls);
    CHECK(r.host == "::1");
    CHECK(r.port == 6390);
    CHECK(r.db == 1);
  }
  SECTION("errors") {
    CHECK(parse_redis_url("tcp://h:1", r) == "must start with redis:// or rediss://");
    CHECK(parse_redis_url("redis://", r) == "has no host");
    CHECK(parse_redis_url("redis://:6379", r) == "has no host");
    CHECK(parse_redis_url("redis://h:", r) == "port must be between 1 and 65535");
    CHECK(parse_redis_url("redis://h:65536", r) == "port must be between 1 and 65535");
    CHECK(parse_redis_url("redis://h:1/x", r) == "database must be a non-negative integer");
    CHECK(parse_redis_url("redis://h:1/-1", r) == "database must be a non-negative integer");
    CHECK(parse_redis_url("redis://h:1/0?timeout=1", r) ==
          "must not have a query string or fragment");
    CHECK(parse_redis_url("redis://a:%zz@h", r) == "has an invalid percent-escape");
    CHECK(parse_redis_url("redis://[::1:6379", r) == "has an invalid host");
    CHECK(parse_redis_url("redis://bad host", r) == "has an invalid host");
  }
  SECTION("a failed parse leaves the config unchanged") {
    r.host = "keep";
    CHECK(parse_redis_url("redis://h:0", r));
    CHECK(r.host == "keep");
  }
}

TEST_CASE("redact_redis_url hides credentials, query and fragment", "[config]") {
  CHECK(redact_redis_url("redis://user:pw@host:6379/0") == "redis://user:***@host:6379/0");
  CHECK(redact_redis_url("redis://pw@host") == "redis://***@host");
  CHECK(redact_redis_url("redis://a:b/c@host") == "redis://a:***@host");
  CHECK(redact_redis_url("redis://host/0?password=x") == "redis://host/0?***");
  CHECK(redact_redis_url("host:6379") == "host:6379");
}

}  // namespace sluice
