#include "middleware/ratelimit/consumers/consumer_cache.hpp"

#include <algorithm>
#include <iterator>

namespace sluice {

ConsumerCache::ConsumerCache(std::size_t max_entries, std::chrono::milliseconds ttl,
                             std::chrono::milliseconds unknown_ttl)
    : max_entries_(std::max<std::size_t>(max_entries, 1)),
      ttl_(ttl),
      unknown_ttl_(std::min(unknown_ttl, ttl)) {}

void ConsumerCache::configure(std::size_t max_entries, std::chrono::milliseconds ttl,
                              std::chrono::milliseconds unknown_ttl) {
  max_entries_ = std::max<std::size_t>(max_entries, 1);
  ttl_ = ttl;
  unknown_ttl_ = std::min(unknown_ttl, ttl);
  trim(found_);
  trim(unknown_);
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

void ConsumerCache::store(std::string_view key, const std::string& fingerprint,
                          std::shared_ptr<const StoredConsumer> consumer, Clock::time_point now) {
  if (const auto it = by_key_.find(key); it != by_key_.end()) erase(it->second);
  forget(fingerprint);
  List& list = consumer ? found_ : unknown_;
  const auto fresh_until = now + (consumer ? ttl_ : unknown_ttl_);
  list.push_front(Slot{std::string(key), fingerprint, std::move(consumer), fresh_until, generation_});
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
