// The per-worker consumer cache: fresh and stale entries, unknown keys in a
// list of their own, least recently used out, change events and invalidation.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>

#include "middleware/ratelimit/consumers/consumer_cache.hpp"

namespace consumer_cache_test {

using namespace std::chrono_literals;
using Clock = sluice::ConsumerCache::Clock;

std::shared_ptr<const sluice::StoredConsumer> consumer(std::string id) {
  auto c = std::make_shared<sluice::StoredConsumer>();
  c->id = std::move(id);
  c->plan = "pro";
  return c;
}

}  // namespace consumer_cache_test

using namespace consumer_cache_test;

TEST_CASE("consumer cache: fresh, then stale after its time", "[consumers]") {
  sluice::ConsumerCache cache(10, 1000ms, 200ms);
  const auto t0 = Clock::now();
  CHECK_FALSE(cache.find("k1", t0));
  cache.store("k1", "fp1", consumer("a"), t0);
  cache.store("k2", "fp2", nullptr, t0);
  CHECK(cache.find("k1", t0 + 999ms)->fresh);
  CHECK(cache.find("k1", t0 + 999ms)->consumer->id == "a");
  CHECK_FALSE(cache.find("k1", t0 + 1000ms)->fresh);
  CHECK(cache.find("k1", t0 + 5000ms)->consumer);  // stale, still there
  CHECK(cache.find("k2", t0 + 199ms)->fresh);
  CHECK_FALSE(cache.find("k2", t0 + 199ms)->consumer);
  CHECK_FALSE(cache.find("k2", t0 + 200ms)->fresh);
  cache.invalidate_all();
  CHECK_FALSE(cache.find("k1", t0)->fresh);
  cache.store("k1", "fp1", consumer("a"), t0);
  CHECK(cache.find("k1", t0)->fresh);
}

TEST_CASE("consumer cache: a change event forgets the key by fingerprint", "[consumers]") {
  sluice::ConsumerCache cache(10, 1000ms, 1000ms);
  const auto t0 = Clock::now();
  cache.store("k1", "fp1", consumer("a"), t0);
  cache.store("k2", "fp2", nullptr, t0);
  cache.forget("fp1");
  cache.forget("fp2");
  cache.forget("fp-none");
  CHECK_FALSE(cache.find("k1", t0));
  CHECK_FALSE(cache.find("k2", t0));
  CHECK(cache.consumers() == 0);
  CHECK(cache.unknown_keys() == 0);
}

TEST_CASE("consumer cache: bounded, and unknown keys never push consumers out", "[consumers]") {
  sluice::ConsumerCache cache(3, 1000ms, 1000ms);
  const auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i) {
    cache.store("c" + std::to_string(i), "fc" + std::to_string(i), consumer("c"), t0);
  }
  CHECK(cache.find("c0", t0));  // c0 is now the most recent: c1 goes first
  cache.store("c3", "fc3", consumer("c"), t0);
  CHECK(cache.consumers() == 3);
  CHECK_FALSE(cache.find("c1", t0));
  CHECK(cache.find("c0", t0));
  for (int i = 0; i < 1000; ++i) {
    cache.store("u" + std::to_string(i), "fu" + std::to_string(i), nullptr, t0);
  }
  CHECK(cache.unknown_keys() == 3);
  CHECK(cache.consumers() == 3);
  CHECK(cache.find("c0", t0));
  // A key that turns out held replaces its unknown entry.
  cache.store("u999", "fu999", consumer("now"), t0);
  CHECK(cache.find("u999", t0)->consumer->id == "now");
  CHECK(cache.unknown_keys() == 2);
  cache.configure(1, 1000ms, 5000ms);
  CHECK(cache.consumers() == 1);
  CHECK(cache.unknown_keys() == 1);
}

TEST_CASE("consumer cache: keeps a copy of its own, which outlives the cache", "[consumers]") {
  std::shared_ptr<const sluice::StoredConsumer> held;
  auto stored = std::make_shared<sluice::StoredConsumer>();
  stored->id = "a-consumer-with-a-long-id";
  stored->plan = "pro";
  stored->bucket_value = "consumer a-consumer-with-a-long-id";
  stored->limits["per_key"].capacity = 5;
  stored->disabled = true;
  stored->key_fingerprints = {"fp1"};
  stored->updated_at_ms = 7;
  {
    sluice::ConsumerCache cache(10, 1000ms, 1000ms);
    const auto t0 = Clock::now();
    cache.store("k1", "fp1", stored, t0);
    held = cache.find("k1", t0)->consumer;
    REQUIRE(held);
    CHECK(held != stored);
    CHECK(held->id == stored->id);
    CHECK(held->plan == "pro");
    CHECK(held->bucket_value == stored->bucket_value);
    CHECK(held->limits == stored->limits);
    CHECK(held->disabled);
    CHECK(held->updated_at_ms == 7);
    CHECK(held->key_fingerprints.empty());  // requests never read them
    cache.clear();
    CHECK(cache.consumers() == 0);
    CHECK_FALSE(cache.find("k1", t0));
    cache.store("k1", "fp1", stored, t0);
    CHECK(cache.find("k1", t0)->consumer->id == stored->id);
  }
  CHECK(held->bucket_value == "consumer a-consumer-with-a-long-id");  // still valid
}
