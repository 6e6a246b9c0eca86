#include "middleware/ratelimit/consumers/lookup_coalescer.hpp"

#include <boost/asio/post.hpp>

namespace sluice {

LookupCoalescer::Join LookupCoalescer::join(const std::string& key, const std::string& fingerprint,
                                            const boost::asio::any_io_executor& executor,
                                            Deliver&& deliver) {
  std::lock_guard lock(mutex_);
  const auto it = lookups_.find(fingerprint);
  if (it != lookups_.end()) {
    it->second.waiters.push_back(Waiter{executor, std::move(deliver)});
    return Join::kWait;
  }
  if (lookups_.size() >= max_in_flight_) return Join::kShed;
  Lookup& lookup = lookups_[fingerprint];
  lookup.key = key;
  lookup.waiters.push_back(Waiter{executor, std::move(deliver)});
  return Join::kLead;
}

void LookupCoalescer::add_cache(boost::asio::any_io_executor executor, std::weak_ptr<void> alive,
                                Learn learn) {
  std::lock_guard lock(mutex_);
  caches_.push_back(Cache{std::move(executor), std::move(alive), std::move(learn)});
}

void LookupCoalescer::finish(const std::string& fingerprint, const ConsumerLookup& result) {
  Lookup lookup;
  std::vector<Cache> caches;
  {
    std::lock_guard lock(mutex_);
    const auto it = lookups_.find(fingerprint);
    if (it == lookups_.end()) return;
    lookup = std::move(it->second);
    lookups_.erase(it);
    if (result.result != ConsumerLookup::Result::kError) {
      std::erase_if(caches_, [](const Cache& c) { return c.alive.expired(); });
      caches = caches_;
    }
  }
  for (auto& cache : caches) {
    boost::asio::post(cache.executor, [cache, key = lookup.key, fingerprint, result] {
      if (cache.alive.lock()) cache.learn(key, fingerprint, result);
    });
  }
  for (auto& waiter : lookup.waiters) {
    boost::asio::post(waiter.executor, [deliver = std::move(waiter.deliver), result] {
      deliver(result);
    });
  }
}

std::size_t LookupCoalescer::in_flight() const {
  std::lock_guard lock(mutex_);
  return lookups_.size();
}

}  // namespace sluice
