#include "middleware/ratelimit/consumers/consumer_resolver.hpp"

#include <atomic>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "gateway/metrics.hpp"

namespace sluice {
namespace {

using Clock = ConsumerCache::Clock;

// A damaged store is worth one warning per process, not one per request.
std::atomic<bool> damage_reported{false};

double& lookup_series(MetricsShard& metrics, std::string_view result) {
  return metrics.value_ref("sluice_consumer_lookups_total", scratch_labels({{"result", result}}));
}

}  // namespace

ConsumerResolver::ConsumerResolver(boost::asio::any_io_executor executor,
                                   std::shared_ptr<LookupCoalescer> coalescer,
                                   MetricsShard& metrics, const Config& config)
    : executor_(std::move(executor)),
      coalescer_(std::move(coalescer)),
      metrics_(metrics),
      lookups_{lookup_series(metrics, "hit"), lookup_series(metrics, "miss"),
               lookup_series(metrics, "unknown"), lookup_series(metrics, "error")},
      secret_(config.redis.key_secret),
      cache_(config.api_keys.cache_max_entries, config.api_keys.cache_ttl,
             config.api_keys.unknown_cache_ttl) {}

void ConsumerResolver::configure(const Config& config) {
  if (config.redis.key_secret != secret_) {
    // Every fingerprint changes with the secret: nothing cached still holds.
    cache_.clear();
    secret_ = config.redis.key_secret;
  }
  cache_.configure(config.api_keys.cache_max_entries, config.api_keys.cache_ttl,
                   config.api_keys.unknown_cache_ttl);
}

std::optional<Resolution> ConsumerResolver::cached(std::string_view key) {
  const auto entry = cache_.find(key, Clock::now());
  if (!entry || !entry->fresh) return std::nullopt;
  (entry->consumer ? lookups_.hit : lookups_.unknown) += 1;
  return Resolution{entry->consumer, false};
}

void ConsumerResolver::lookup(std::string_view key_view, std::function<void(Resolution)> done) {
  std::string key(key_view);
  std::string fingerprint = key_fingerprint(key, secret_);
  if (!store_) {
    ConsumerLookup none;
    none.error = "no connection to the store";
    boost::asio::post(executor_, [self = shared_from_this(), key = std::move(key),
                                  fingerprint = std::move(fingerprint), none = std::move(none),
                                  done = std::move(done)] { self->apply(key, fingerprint, none, done); });
    return;
  }
  auto deliver = [self = shared_from_this(), key, fingerprint,
                  done = std::move(done)](const ConsumerLookup& result) {
    self->apply(key, fingerprint, result, done);
  };
  switch (coalescer_->join(key, fingerprint, executor_, std::move(deliver))) {
    case LookupCoalescer::Join::kWait:
      return;
    case LookupCoalescer::Join::kShed: {
      // Not taken by the coalescer: `deliver` (which holds `done`) answers.
      ConsumerLookup shed;
      shed.error = "too many consumer lookups under way";
      boost::asio::post(executor_, [shed = std::move(shed), deliver = std::move(deliver)] {
        deliver(shed);
      });
      return;
    }
    case LookupCoalescer::Join::kLead:
      break;
  }
  store_->lookup(fingerprint, [coalescer = coalescer_, fingerprint](ConsumerLookup result) {
    coalescer->finish(fingerprint, result);
  });
}

void ConsumerResolver::join_coalescer() {
  std::weak_ptr<ConsumerResolver> weak = weak_from_this();
  coalescer_->add_cache(executor_, weak,
                        [weak](const std::string& key, const std::string& fingerprint,
                               const ConsumerLookup& result) {
                          if (auto self = weak.lock()) self->learn(key, fingerprint, result);
                        });
}

void ConsumerResolver::learn(const std::string& key, const std::string& fingerprint,
                             const ConsumerLookup& result) {
  if (result.result == ConsumerLookup::Result::kError) return;
  const auto consumer =
      result.result == ConsumerLookup::Result::kFound ? result.consumer : nullptr;
  cache_.store(key, fingerprint, consumer, Clock::now());
}

void ConsumerResolver::apply(const std::string& key, const std::string& fingerprint,
                             const ConsumerLookup& result,
                             const std::function<void(Resolution)>& done) {
  const auto now = Clock::now();
  switch (result.result) {
    case ConsumerLookup::Result::kFound:
      lookups_.miss += 1;
      cache_.store(key, fingerprint, result.consumer, now);
      return done(Resolution{result.consumer, false});
    case ConsumerLookup::Result::kDamaged:
      metrics_.add("sluice_consumer_store_damaged_total", "");
      if (!damage_reported.exchange(true)) {
        spdlog::warn(
            "consumer store: an entry in Redis is not one Sluice wrote (another writer?); the "
            "key it serves is treated as unknown (counted in "
            "sluice_consumer_store_damaged_total, reported once)");
      }
      [[fallthrough]];
    case ConsumerLookup::Result::kUnknown:
      lookups_.unknown += 1;
      cache_.store(key, fingerprint, nullptr, now);
      return done(Resolution{nullptr, false});
    case ConsumerLookup::Result::kError:
      break;
  }
  lookups_.error += 1;
  // What was cached, however old, is better than nothing while Redis is away.
  if (const auto stale = cache_.find(key, now)) return done(Resolution{stale->consumer, false});
  done(Resolution{nullptr, true});
}

}  // namespace sluice
