// Redis keys of buckets: prefix + limit name + ":" + the 128-bit key hash in hex
// (a hash tag for a cluster), and the hash with and without a secret.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"
#include "upstream/redis/cluster/slot.hpp"

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

TEST_CASE("redis keys for a cluster: the hash is a hash tag, so one key value is one slot",
          "[ratelimit][keys]") {
  using sluice::KeyStyle;
  const sluice::LimitDescriptor a{"per_key", sluice::key_hash("abc"), 1, 1};
  const sluice::LimitDescriptor b{"per_key_burst", sluice::key_hash("abc"), 1, 1};
  const sluice::LimitDescriptor other{"per_key", sluice::key_hash("abd"), 1, 1};
  CHECK(sluice::redis_key("sluice:", a, KeyStyle::kHashTag) ==
        "sluice:per_key:{ba7816bf8f01cfea414140de5dae2223}");
  const auto slot = [](const sluice::LimitDescriptor& d) {
    return sluice::redis::cluster::key_slot(sluice::redis_key("sluice:", d, KeyStyle::kHashTag));
  };
  CHECK(slot(a) == slot(b));
  CHECK(slot(a) == sluice::redis::cluster::key_slot("ba7816bf8f01cfea414140de5dae2223"));
  CHECK(slot(a) != slot(other));  // these two happen to differ; most pairs do
  CHECK(sluice::redis_keys("x:", std::vector{a, b}, KeyStyle::kHashTag) ==
        std::vector<std::string>{"x:per_key:{ba7816bf8f01cfea414140de5dae2223}",
                                 "x:per_key_burst:{ba7816bf8f01cfea414140de5dae2223}"});
}

TEST_CASE("key hashes with a secret are HMAC-SHA-256, and differ from plain SHA-256",
          "[ratelimit][keys]") {
  // RFC 4231 test case 2: HMAC-SHA-256(key "Jefe", "what do ya want for nothing?").
  const sluice::LimitDescriptor d{"l", sluice::key_hash("what do ya want for nothing?", "Jefe"),
                                  1, 1};
  CHECK(sluice::redis_key("", d) == "l:5bdcc146bf60754e6a042426089575c7");
  // Test case 6: a key longer than SHA-256's block, hashed first.
  const sluice::LimitDescriptor long_key{
      "l",
      sluice::key_hash("Test Using Larger Than Block-Size Key - Hash Key First",
                       std::string(131, '\xaa')),
      1, 1};
  CHECK(sluice::redis_key("", long_key) == "l:60e431591ee0b67f0d8a26aacbf5b77f");
  // Test case 1: a key of 20 bytes; then case 2's again, after the re-key.
  CHECK(sluice::redis_key("", sluice::LimitDescriptor{"l", sluice::key_hash("Hi There",
                                                          std::string(20, '\x0b')),
                                                      1, 1}) ==
        "l:b0344c61d8db38535ca8afceaf0bf12b");
  CHECK(sluice::key_hash("what do ya want for nothing?", "Jefe") == d.key_hash);
  CHECK(sluice::key_hash("abc", "secret-one-0123456") != sluice::key_hash("abc"));
  CHECK(sluice::key_hash("abc", "secret-one-0123456") !=
        sluice::key_hash("abc", "secret-two-0123456"));
  CHECK(sluice::key_hash("abc", "secret-one-0123456") ==
        sluice::key_hash("abc", "secret-one-0123456"));
}

TEST_CASE("key hashes kept per thread answer only for the same input under the same secret",
          "[ratelimit][keys]") {
  // SHA-256("abc") and the RFC 4231 HMAC, asked in turns: the memo kept for
  // one must never answer for the other.
  const std::string plain = "l:ba7816bf8f01cfea414140de5dae2223";
  const std::string hmac = "l:5bdcc146bf60754e6a042426089575c7";
  const auto name = [](std::string_view input, std::string_view secret) {
    return sluice::redis_key("", sluice::LimitDescriptor{"l", sluice::bucket_key_hash(input, secret), 1, 1});
  };
  for (int round = 0; round < 3; ++round) {
    CHECK(name("abc", "") == plain);
    CHECK(name("what do ya want for nothing?", "Jefe") == hmac);
    CHECK(name("abc", "Jefe") != plain);
    CHECK(name("what do ya want for nothing?", "") != hmac);
  }
  // Many inputs (more than the memo's slots, so some share one) hash as
  // when asked alone; so do inputs longer than the memo keeps.
  std::vector<sluice::KeyHash> first;
  for (int i = 0; i < 500; ++i) first.push_back(sluice::bucket_key_hash("key-" + std::to_string(i)));
  for (int i = 499; i >= 0; --i) {
    const std::string input = "key-" + std::to_string(i);
    CHECK(sluice::bucket_key_hash(input) == first[i]);
    CHECK(sluice::bucket_key_hash(input) == sluice::key_hash(input));
  }
  const std::string long_input(1000, 'x');
  CHECK(sluice::bucket_key_hash(long_input) == sluice::key_hash(long_input));
  CHECK(sluice::bucket_key_hash(long_input) != sluice::bucket_key_hash(long_input + "y"));
}
