// The consumer lookups under way in one process: concurrent cache misses of
// one key, on any worker, share one Redis call, what it finds is handed to
// every worker's cache (so that a key is looked up once per process, and a
// consumer cached by one worker is cached by all while Redis is away), and
// at most max_in_flight
// distinct keys are looked up at once (past that a key is not looked up: a
// flood of made-up keys costs Redis no more than that). Its mutex is taken on
// a cache miss only, never on a hit. Each waiter's result is posted to the
// executor it joined from.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "middleware/ratelimit/consumers/consumer_store.hpp"

namespace sluice {

class LookupCoalescer {
 public:
  using Deliver = std::function<void(const ConsumerLookup&)>;
  // A worker's cache learns what a lookup of (key, fingerprint) found.
  using Learn = std::function<void(const std::string& key, const std::string& fingerprint,
                                   const ConsumerLookup& result)>;

  enum class Join {
    kLead,   // the caller looks the key up, then calls finish()
    kWait,   // a lookup is under way: `deliver` gets its result
    kShed,   // too many lookups under way: the key is not looked up
  };

  explicit LookupCoalescer(std::size_t max_in_flight = 256) : max_in_flight_(max_in_flight) {}

  // `deliver` is taken (moved from) unless the lookup is shed.
  Join join(const std::string& key, const std::string& fingerprint,
            const boost::asio::any_io_executor& executor, Deliver&& deliver);

  // A worker's cache: `learn` is posted to `executor` after every lookup that
  // found an answer (not an error), until `alive` expires.
  void add_cache(boost::asio::any_io_executor executor, std::weak_ptr<void> alive, Learn learn);
  // The lookup led by a kLead caller ended: every waiter (the leader too)
  // gets `result` on its own executor.
  void finish(const std::string& fingerprint, const ConsumerLookup& result);

  std::size_t in_flight() const;

 private:
  struct Waiter {
    boost::asio::any_io_executor executor;
    Deliver deliver;
  };
  struct Lookup {
    std::string key;
    std::vector<Waiter> waiters;
  };
  struct Cache {
    boost::asio::any_io_executor executor;
    std::weak_ptr<void> alive;
    Learn learn;
  };
  const std::size_t max_in_flight_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Lookup> lookups_;  // by fingerprint
  std::vector<Cache> caches_;
};

}  // namespace sluice
