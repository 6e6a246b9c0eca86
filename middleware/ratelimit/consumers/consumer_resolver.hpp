// One worker's way from an API key to its consumer in the store: the cache
// first (a fresh entry answers at once, with no Redis call and no lock), else
// one lookup shared with every worker missing the same key at the same time
// (lookup_coalescer.hpp). While the store cannot answer, a stale entry keeps
// being used; a key with none is treated as unknown. Counts
// sluice_consumer_lookups_total{result}: hit (a fresh cached consumer), miss
// (looked up and found), unknown (no consumer holds the key, cached or looked
// up), error (the store did not answer, or too many lookups were under way).
// Created, used and destroyed on the worker's executor.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>

#include "gateway/config/config.hpp"
#include "middleware/ratelimit/consumers/consumer_cache.hpp"
#include "middleware/ratelimit/consumers/lookup_coalescer.hpp"

namespace sluice {

class MetricsShard;

struct Resolution {
  // Null: no consumer holds the key. From the cache: its copy (consumer_cache.hpp).
  std::shared_ptr<const StoredConsumer> consumer;
  bool error = false;  // the store did not answer and nothing was cached
};

class ConsumerResolver : public std::enable_shared_from_this<ConsumerResolver> {
 public:
  ConsumerResolver(boost::asio::any_io_executor executor,
                   std::shared_ptr<LookupCoalescer> coalescer, MetricsShard& metrics,
                   const Config& config);

  // A reloaded configuration: the cache's bounds and the fingerprint secret.
  void configure(const Config& config);
  // The worker's store (null while it has none): lookups go through it.
  void set_store(ConsumerStore* store) { store_ = store; }

  // The consumer of `key` when a fresh entry has it (or knows it unknown).
  std::optional<Resolution> cached(std::string_view key);
  // Looks `key` up and calls `done` on this executor (never from inside the call).
  void lookup(std::string_view key, std::function<void(Resolution)> done);

  // A change event named this key's fingerprint.
  void forget(const std::string& fingerprint) { cache_.forget(fingerprint); }
  // What a lookup on any worker found (not an error), for this cache.
  void learn(const std::string& key, const std::string& fingerprint, const ConsumerLookup& result);
  // Has the process's lookups tell this cache what they find (once, after
  // construction: it needs shared_from_this).
  void join_coalescer();
  void invalidate_all() { cache_.invalidate_all(); }
  std::size_t cached_consumers() const { return cache_.consumers(); }

 private:
  void apply(const std::string& key, const std::string& fingerprint, const ConsumerLookup& result,
             const std::function<void(Resolution)>& done);
  // The four series of sluice_consumer_lookups_total, looked up once.
  struct Counters {
    double& hit;
    double& miss;
    double& unknown;
    double& error;
  };

  boost::asio::any_io_executor executor_;
  std::shared_ptr<LookupCoalescer> coalescer_;
  MetricsShard& metrics_;
  Counters lookups_;
  std::string secret_;
  ConsumerCache cache_;
  ConsumerStore* store_ = nullptr;
};

}  // namespace sluice
