// One worker's cache of looked-up consumers, by API key (so that a hit costs
// no HMAC; a key never leaves the process), each also indexed by its
// fingerprint for the store's change events: consumers found (at most max_entries, least recently used out) and keys found unknown
// (in a list of their own with the same bound, so that a flood of made-up keys
// never pushes a consumer out). A consumer is fresh for cache_ttl, an unknown
// key for unknown_cache_ttl (at most cache_ttl). An entry past its time, or
// older than the last invalidate_all(), is stale: it must be looked up again,
// and is used only while that lookup fails. Pure: the caller passes the time.
// Not thread-safe: one per worker.
//
// What the cache keeps (its lists, indexes, keys and fingerprints, and its own
// copy of each consumer) comes from a memory pool of its own, not from the
// worker's heap (but for a copy's strings longer than the short-string buffer
// and its per-limit overrides). Entries made while a lookup's temporaries (its Redis
// reply, the parsed document) come and go would otherwise stay scattered over
// the worker's heap with free holes between them, and malloc hands those
// holes to every later request in turn: each request's allocations then
// spread over about six times the pages of a worker without them (360 against
// 61 distinct 4 KiB pages per 100 requests, bench row 22 against row 21),
// which costs every request cache and TLB misses.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <memory_resource>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "middleware/ratelimit/consumers/consumer.hpp"

namespace sluice {

class ConsumerCache {
 public:
  using Clock = std::chrono::steady_clock;

  struct Entry {
    // Null: the key is unknown. The cache's own copy of what the store
    // returned, without the key fingerprints; release it on the cache's thread.
    std::shared_ptr<const StoredConsumer> consumer;
    bool fresh = false;
  };

  ConsumerCache(std::size_t max_entries, std::chrono::milliseconds ttl,
                std::chrono::milliseconds unknown_ttl);
  ConsumerCache(const ConsumerCache&) = delete;
  ConsumerCache& operator=(const ConsumerCache&) = delete;

  // New bounds (a reload): entries over the bound leave, oldest first.
  void configure(std::size_t max_entries, std::chrono::milliseconds ttl,
                 std::chrono::milliseconds unknown_ttl);

  // The entry of `key`, fresh or stale; a hit counts as recent use.
  std::optional<Entry> find(std::string_view key, Clock::time_point now);

  // What a lookup of `key` (whose fingerprint is `fingerprint`) found: the
  // consumer, or null when no consumer holds the key.
  void store(std::string_view key, const std::string& fingerprint,
             std::shared_ptr<const StoredConsumer> consumer, Clock::time_point now);

  // A change event named this key's fingerprint: it is forgotten.
  void forget(const std::string& fingerprint);
  // Every entry becomes stale (a lost subscription may have missed changes).
  void invalidate_all() { ++generation_; }
  // Every entry leaves (the fingerprint secret changed).
  void clear();

  std::size_t consumers() const { return found_.size(); }
  std::size_t unknown_keys() const { return unknown_.size(); }

 private:
  struct Slot {
    std::pmr::string key;
    std::pmr::string fingerprint;
    std::shared_ptr<const StoredConsumer> consumer;
    Clock::time_point fresh_until;
    std::uint64_t generation = 0;
  };
  using List = std::pmr::list<Slot>;
  using Index = std::pmr::unordered_map<std::string_view, List::iterator>;

  void trim(List& list);
  void erase(List::iterator slot);
  std::shared_ptr<const StoredConsumer> own_copy(const StoredConsumer& consumer);

  std::size_t max_entries_;
  std::chrono::milliseconds ttl_;
  std::chrono::milliseconds unknown_ttl_;
  std::uint64_t generation_ = 0;
  // Shared with the consumers copied into it: one still held when the cache
  // goes keeps it until released. Declared before the containers: it outlives them.
  std::shared_ptr<std::pmr::unsynchronized_pool_resource> pool_;
  List found_;    // most recently used first
  List unknown_;  // the same, for unknown keys
  Index by_key_;  // views Slot::key
  Index by_fingerprint_;
};

}  // namespace sluice
