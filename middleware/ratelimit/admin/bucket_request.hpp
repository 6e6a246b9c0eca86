// The bucket API's requests as pure functions: the limit, values and plan a
// request target names, the bucket they name under a configuration, and the
// JSON document of a bucket's state. A bucket is found through the same code
// that keys requests (build_limit_descriptors on a RequestView carrying the
// values where a request would carry them), never by a second derivation of
// the hash input. Nothing here logs or echoes a value. No I/O.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/config/config.hpp"
#include "middleware/ratelimit/consumers/consumer.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

// The path under which buckets are named: /ratelimit/buckets/{limit}.
inline constexpr std::string_view kBucketsPath = "/ratelimit/buckets/";

// Why a bucket request cannot be answered: an HTTP status and a message
// that names config items only.
struct BucketRequestError {
  unsigned status = 400;
  std::string message;
};

// What a request target names: the limit, one value per keyed part (decoded),
// and the plan if given.
struct BucketQuery {
  std::string limit;
  std::vector<std::string> values;
  std::optional<std::string> plan;
};

// Reads "/ratelimit/buckets/{limit}?value=V[&value=V2][&plan=P]". Values and
// the plan are form-decoded; any other parameter is refused.
std::variant<BucketQuery, BucketRequestError> parse_bucket_target(std::string_view target);

// The bucket a query names under `config`.
struct BucketTarget {
  const LimitConfig* limit = nullptr;
  std::string plan;
  LimitDescriptor descriptor;
};

// How many values a limit's key takes: one per part but `global`.
std::size_t bucket_value_count(const LimitConfig& limit);

// An API key the consumer store must be asked about before the bucket can be
// named (the store is on, the limit is keyed by api_key, and no YAML consumer
// holds the key): ask it as a request's would be (the worker's resolver), and
// call find_bucket again with what it found.
struct StoreQuestion {
  std::string key;
};

// The bucket of `query`: 404 for an unknown limit; 400 for the wrong number
// of values, an unknown plan, a value that is not an IP address where the key
// takes one, an empty value, or a value that a request would not be keyed by
// (an API key that names no consumer, a malformed Bearer credential). `stored`
// is the store's answer for the StoreQuestion's key (null: no consumer holds
// it); without it, a question.
std::variant<BucketTarget, BucketRequestError, StoreQuestion> find_bucket(
    const Config& config, const BucketQuery& query,
    const std::optional<std::shared_ptr<const StoredConsumer>>& stored = std::nullopt);

// The JSON answer to a GET: limit, bucket (its hashed name), plan,
// algorithm, capacity, refill_per_second or window_ms, tokens, full_in_ms.
nlohmann::ordered_json bucket_document(const BucketTarget& target, const BucketView& view);

}  // namespace sluice
