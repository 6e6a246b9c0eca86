// The consumer store in Redis: look a key's fingerprint up, and read, write,
// delete and list consumers, each in one script call. The layout (every key
// under one hash tag, so that a Cluster keeps the store in one slot and each
// script stays atomic):
//   <base>c:<id>        hash: doc (consumer_document), plan, keys
//                       (fingerprints, space-separated), updated_at (ms)
//   <base>k:<fp>        string: the id of the consumer holding that key
//   <base>ids           sorted set (all scores 0): every id, for the list
//   <base>plan:<plan>   sorted set: the ids on that plan
//   <base>changes       pub/sub channel: "<id> <fp> <fp>..." on every change
// where <base> is redis.key_prefix + "{consumers}:". It is handed a Redis
// client it does not own; used and completed on that client's executor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "middleware/ratelimit/consumers/consumer.hpp"
#include "upstream/redis/client.hpp"

namespace sluice {

// The prefix of every key of the store under `key_prefix`, and its channel.
std::string consumer_store_base(std::string_view key_prefix);
std::string consumer_changes_channel(std::string_view key_prefix);

struct ConsumerLookup {
  enum class Result {
    kFound,    // `consumer` is set
    kUnknown,  // no consumer holds the key
    kDamaged,  // the entry or the record is not what Sluice writes (another writer)
    kError,    // Redis did not answer (error holds why)
  };
  Result result = Result::kError;
  std::shared_ptr<const StoredConsumer> consumer;
  std::string error;
};

struct ConsumerWrite {
  // kError: Redis did not run the write (not connected, an error reply).
  // kUnknown: the write was sent and its answer lost (a timeout, the
  // connection lost or closed): Redis may have applied it.
  enum class Result { kCreated, kReplaced, kUnchanged, kConflict, kError, kUnknown };
  Result result = Result::kError;
  std::size_t conflict_index = 0;  // kConflict: which of the keys (0-based) another holds
  std::int64_t updated_at_ms = 0;
  std::vector<std::string> changed;  // fingerprints whose entry changed (created, replaced)
  std::string error;
};

struct ConsumerRemoval {
  bool ok = false;       // the store answered
  bool existed = false;  // there was such a consumer
  std::vector<std::string> changed;  // the fingerprints of the keys it held
  std::string error;
};

struct ConsumerRead {
  enum class Result { kFound, kNotFound, kDamaged, kError };
  Result result = Result::kError;
  std::optional<StoredConsumer> consumer;
  std::string error;
};

struct ConsumerPage {
  bool ok = false;
  std::vector<StoredConsumer> consumers;  // damaged records are left out
  std::string next_cursor;                // empty at the end
  std::string error;
};

class ConsumerStore {
 public:
  ConsumerStore(redis::Client& client, std::string key_prefix);

  // Scripts are loaded on the client's current and future connections.
  void load_scripts();
  void set_key_prefix(std::string key_prefix) { base_ = consumer_store_base(key_prefix); }

  void lookup(const std::string& fingerprint, std::function<void(ConsumerLookup)> done);
  void put(const StoredConsumer& consumer, std::function<void(ConsumerWrite)> done);
  void read(const std::string& id, std::function<void(ConsumerRead)> done);
  void remove(const std::string& id, std::function<void(ConsumerRemoval)> done);
  // Up to `count` consumers after `cursor` (empty: from the start), of `org`
  // only when it is not empty, else of `plan` only when that is not empty.
  void list(const std::string& plan, const std::string& org, const std::string& cursor,
            std::size_t count,
            std::function<void(ConsumerPage)> done);

 private:
  redis::Client& client_;
  std::string base_;
};

}  // namespace sluice
