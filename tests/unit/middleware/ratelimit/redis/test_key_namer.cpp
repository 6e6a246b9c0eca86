// Redis keys of buckets: prefix + limit name + ":" + the 128-bit key hash in hex.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"

TEST_CASE("redis keys: prefix, limit name and a 128-bit hash", "[ratelimit][keys]") {
  const sluice::LimitDescriptor d{"per_key", sluice::key_hash("k6:secret"), 1, 1};
  const std::string key = sluice::redis_key("sluice:", d);
  REQUIRE(key.size() == std::string("sluice:per_key:").size() + 32);
  CHECK(key.rfind("sluice:per_key:", 0) == 0);
  CHECK(key.find_first_not_of("0123456789abcdef", 15) == std::string::npos);
  CHECK(key.find("secret") == std::string::npos);
  // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
  const sluice::LimitDescriptor abc{"l", sluice::key_hash("abc"), 1, 1};
  const sluice::LimitDescriptor abd{"l", sluice::key_hash("abd"), 1, 1};
  CHECK(sluice::redis_key("p:", abc) == "p:l:ba7816bf8f01cfea414140de5dae2223");
  CHECK(sluice::redis_key("p:", abd) != sluice::redis_key("p:", abc));
}

TEST_CASE("redis keys: one per descriptor, in order", "[ratelimit][keys]") {
  const std::vector<sluice::LimitDescriptor> descriptors = {{"a", sluice::key_hash("abc"), 1, 1},
                                                            {"b", sluice::key_hash("abc"), 1, 1}};
  CHECK(sluice::redis_keys("x:", descriptors) ==
        std::vector<std::string>{"x:a:ba7816bf8f01cfea414140de5dae2223",
                                 "x:b:ba7816bf8f01cfea414140de5dae2223"});
  CHECK(sluice::redis_keys("x:", {}).empty());
}
