// The worker's cache of verified tokens: the digest, the bound, and who is
// evicted (second chance: a token used since the hand last passed stays).
#include <catch2/catch.hpp>

#include "middleware/auth/token_cache.hpp"

namespace sluice {
namespace {

TokenCache::Entry entry(std::int64_t expires_at) {
  auto claims = std::make_shared<const TokenCache::Claims>(
      TokenCache::Claims{{"sub", "t" + std::to_string(expires_at)}});
  return {expires_at, 0, 0, std::move(claims)};
}

}  // namespace

TEST_CASE("token cache: the digest is the token's SHA-256", "[jwt][token_cache]") {
  TokenCache cache;
  const auto d = cache.digest("abc");
  // FIPS 180-2's example.
  CHECK(d[0] == 0xba);
  CHECK(d[1] == 0x78);
  CHECK(d[31] == 0xad);
  CHECK(cache.digest("abc") == d);  // the context is reused
  CHECK(cache.digest("abd") != d);
}

TEST_CASE("token cache: find, erase, and nothing kept at max 0", "[jwt][token_cache]") {
  TokenCache cache;
  const auto a = cache.digest("a");
  cache.insert(a, entry(10), 0);
  CHECK(cache.find(a) == nullptr);
  cache.insert(a, entry(10), 4);
  REQUIRE(cache.find(a) != nullptr);
  CHECK(cache.find(a)->expires_at == 10);
  CHECK((*cache.find(a)->claims)[0].second == "t10");
  cache.insert(a, entry(11), 4);  // again: replaced, not doubled
  CHECK(cache.size() == 1);
  CHECK(cache.find(a)->expires_at == 11);
  cache.erase(a);
  CHECK(cache.find(a) == nullptr);
  CHECK(cache.size() == 0);
}

TEST_CASE("token cache: bounded, a used token outlives an unused one", "[jwt][token_cache]") {
  TokenCache cache;
  std::vector<TokenCache::Digest> d;
  for (int i = 0; i < 5; ++i) d.push_back(cache.digest("token-" + std::to_string(i)));
  for (int i = 0; i < 3; ++i) cache.insert(d[i], entry(i), 3);
  CHECK(cache.find(d[0]) != nullptr);  // used: gets a second chance
  cache.insert(d[3], entry(3), 3);
  CHECK(cache.size() == 3);
  CHECK(cache.find(d[1]) == nullptr);  // the oldest unused went
  CHECK(cache.find(d[0]) != nullptr);
  CHECK(cache.find(d[2]) != nullptr);
  // Every entry used now: the hand clears them all once, then takes the oldest.
  CHECK(cache.find(d[3]) != nullptr);
  cache.insert(d[4], entry(4), 3);
  CHECK(cache.size() == 3);
  CHECK(cache.find(d[4]) != nullptr);
  CHECK(cache.find(d[2]) == nullptr);
}

TEST_CASE("token cache: entries erased and inserted again keep the bound and the order",
          "[jwt][token_cache]") {
  TokenCache cache;
  const auto a = cache.digest("a");
  const auto b = cache.digest("b");
  const auto c = cache.digest("c");
  // Expired and verified again many times: the stale ring entries of a are
  // skipped (and compacted), never evicting the live a in b's place.
  for (int i = 0; i < 1000; ++i) {
    cache.insert(a, entry(i), 2);
    if (i == 0) cache.insert(b, entry(0), 2);
    cache.erase(a);
  }
  cache.insert(a, entry(1000), 2);
  CHECK(cache.size() == 2);
  cache.insert(c, entry(0), 2);  // b is the oldest live entry
  CHECK(cache.size() == 2);
  CHECK(cache.find(b) == nullptr);
  CHECK(cache.find(a) != nullptr);
  CHECK(cache.find(c) != nullptr);
  cache.clear();
  CHECK(cache.size() == 0);
  CHECK(cache.find(a) == nullptr);
}

}  // namespace sluice
