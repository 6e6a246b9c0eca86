#include "middleware/ratelimit/consumers/consumer_cache.hpp"

#include <algorithm>
#include <iterator>

namespace sluice {
namespace {

// The allocator of the cache's copies of consumers: from the cache's pool,
// which it keeps alive (a copy a request still holds outlives a reset cache).
template <class T>
struct PoolAllocator {
  using value_type = T;
  std::shared_ptr<std::pmr::unsynchronized_pool_resource> pool;

  explicit PoolAllocator(std::shared_ptr<std::pmr::unsynchronized_pool_resource> p)
      : pool(std::move(p)) {}
  template <class U>
  PoolAllocator(const PoolAllocator<U>& other) : pool(other.pool) {}  // NOLINT
  T* allocate(std::size_t n) {
    return static_cast<T*>(pool->allocate(n * sizeof(T), alignof(T)));
  }
  void deallocate(T* p, std::size_t n) { pool->deallocate(p, n * sizeof(T), alignof(T)); }
  template <class U>
  bool operator==(const PoolAllocator<U>& other) const {
    return pool == other.pool;
  }
};

}  // namespace

ConsumerCache::ConsumerCache(std::size_t max_entries, std::chrono::milliseconds ttl,
                             std::chrono::milliseconds unknown_ttl)
    : max_entries_(std::max<std::size_t>(max_entries, 1)),
      ttl_(ttl),
      unknown_ttl_(std::min(unknown_ttl, ttl)),
      pool_(std::make_shared<std::pmr::unsynchronized_pool_resource>()),
      found_(pool_.get()),
      unknown_(pool_.get()),
      by_key_(pool_.get()),
      by_fingerprint_(pool_.get()) {}

void ConsumerCache::configure(std::size_t max_entries, std::chrono::milliseconds ttl,
                              std::chrono::milliseconds unknown_ttl) {
  max_entries_ = std::max<std::size_t>(max_entries, 1);
  ttl_ = ttl;
  unknown_ttl_ = std::min(unknown_ttl, ttl);
  trim(found_);
  trim(unknown_);
}

void ConsumerCache::clear() {
  by_key_.clear();
  by_fingerprint_.clear();
  found_.clear();
  unknown_.clear();
}

std::optional<ConsumerCache::Entry> ConsumerCache::find(std::string_view key,
                                                        Clock::time_point now) {
  const auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  const List::iterator slot = it->second;
  List& list = slot->consumer ? found_ : unknown_;
  list.splice(list.begin(), list, slot);
  return Entry{slot->consumer, now < slot->fresh_until && slot->generation == generation_};
}

std::shared_ptr<const StoredConsumer> ConsumerCache::own_copy(const StoredConsumer& consumer) {
  // What requests read, without the key fingerprints (the copy would keep
  // them on the worker's heap, and only the store and the admin API use them).
  auto copy = std::allocate_shared<StoredConsumer>(PoolAllocator<StoredConsumer>(pool_));
  copy->id = consumer.id;
  copy->plan = consumer.plan;
  copy->org = consumer.org;
  copy->limits = consumer.limits;
  copy->disabled = consumer.disabled;
  copy->updated_at_ms = consumer.updated_at_ms;
  copy->bucket_value = consumer.bucket_value;
  return copy;
}

void ConsumerCache::store(std::string_view key, const std::string& fingerprint,
                          std::shared_ptr<const StoredConsumer> consumer, Clock::time_point now) {
  if (const auto it = by_key_.find(key); it != by_key_.end()) erase(it->second);
  forget(fingerprint);
  if (consumer) consumer = own_copy(*consumer);
  List& list = consumer ? found_ : unknown_;
  const auto fresh_until = now + (consumer ? ttl_ : unknown_ttl_);
  list.push_front(Slot{std::pmr::string(key, pool_.get()),
                       std::pmr::string(fingerprint, pool_.get()), std::move(consumer),
                       fresh_until, generation_});
  by_key_[list.front().key] = list.begin();
  by_fingerprint_[list.front().fingerprint] = list.begin();
  trim(list);
}

void ConsumerCache::forget(const std::string& fingerprint) {
  const auto it = by_fingerprint_.find(fingerprint);
  if (it != by_fingerprint_.end()) erase(it->second);
}

void ConsumerCache::erase(List::iterator slot) {
  by_key_.erase(slot->key);
  by_fingerprint_.erase(slot->fingerprint);
  (slot->consumer ? found_ : unknown_).erase(slot);
}

void ConsumerCache::trim(List& list) {
  while (list.size() > max_entries_) erase(std::prev(list.end()));
}

}  // namespace sluice
