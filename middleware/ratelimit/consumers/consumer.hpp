// A consumer of the consumer store, as pure functions: the record (who holds
// which keys, on which plan, with which per-limit overrides), the body of a
// PUT (or of an import line) read and checked against the configuration, the
// canonical document kept in Redis and read back from it, and the JSON the
// admin API shows. Raw API keys exist only while a body is read: a record
// holds their fingerprints (an HMAC under redis.key_secret_file). No I/O.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/config/config.hpp"

namespace sluice {

// A consumer holds 1 to this many keys (two during a rotation, and room for more).
inline constexpr std::size_t kMaxConsumerKeys = 16;

// A per-consumer override of one limit's parameters (only those the limit's
// algorithm has: capacity and refill_per_second for a token bucket, capacity
// and window_ms for a sliding window).
struct LimitOverride {
  std::optional<double> capacity;
  std::optional<double> refill_per_second;
  std::optional<double> window_seconds;

  bool operator==(const LimitOverride&) const = default;
};

struct StoredConsumer {
  std::string id;
  std::string plan;
  std::string org;  // its organisation; empty: none
  std::map<std::string, LimitOverride> limits;  // by limit name
  bool disabled = false;
  // 32 lower-case hex digits each: in the body's order when read from a body,
  // sorted when read from the store.
  std::vector<std::string> key_fingerprints;
  std::int64_t updated_at_ms = 0;             // Redis time of the last change
  // What its requests' api_key key parts are keyed by: one bucket per
  // consumer, whichever of its keys a request carries. It holds a space, which
  // no API key can, so it never equals a key. Set by read_consumer_body and
  // parse_consumer_document.
  std::string bucket_value;
};

// The fingerprint of an API key under the fleet secret: HMAC-SHA-256 of the
// key (in a domain of its own, so it never equals a bucket's hash), 128 bits
// as 32 lower-case hex digits. What the store keeps and looks keys up by.
std::string key_fingerprint(std::string_view key, std::string_view secret);

// Whether `s` has the form key_fingerprint gives.
bool is_key_fingerprint(std::string_view s);

// Why a body is refused: the field it names ("keys[2]", "limits.per_key.capacity")
// and what is wrong with it. Never holds a key.
struct BodyProblem {
  std::string field;
  std::string detail;
};

// A PUT body (or an import line, which also carries "id") as JSON text, read
// and checked against `config`: fields id (import only: `id_in_body`), keys
// (1 to kMaxConsumerKeys distinct keys, each a valid API key), plan (one of
// config.plans), limits (optional: names of config.limits, each an object of
// the fields its algorithm has, positive numbers; window_ms a whole number of
// milliseconds) and disabled (optional boolean). Any other field is refused.
// `path_id` is the id from the URL (empty for an import line). The keys come
// back fingerprinted under config.redis.key_secret.
std::variant<StoredConsumer, BodyProblem> read_consumer_body(std::string_view body,
                                                             const Config& config,
                                                             std::string_view path_id);

// The document the store keeps for a consumer: canonical JSON (sorted keys,
// no whitespace) of plan, limits, disabled and keys, without id and
// updated_at. Two bodies that mean the same consumer give the same document.
std::string consumer_document(const StoredConsumer& consumer);

// A consumer read back from the store: nullopt when the document is not one
// consumer_document could have written (another writer corrupted it).
std::optional<StoredConsumer> parse_consumer_document(std::string_view id, std::string_view doc,
                                                      std::int64_t updated_at_ms);

// What the admin API shows: id, plan, limits (window_ms in milliseconds),
// disabled, keys (fingerprints), updated_at (RFC 3339, UTC, milliseconds).
nlohmann::ordered_json consumer_json(const StoredConsumer& consumer);

// The parameters of `limit` for a request of this consumer: the plan's, then
// the consumer's override of that limit on top (its overrides are by limit
// name: `name`, or the limit's own when empty).
BucketParams consumer_params(const LimitConfig& limit, const StoredConsumer& consumer,
                             std::string_view name = {});

}  // namespace sluice
