// The identity of one bucket inside the local layer's tables: its limit name
// and key hash (the same key value hashes alike under every limit, so the name
// is part of it). Header-only vocabulary; no I/O.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

struct BucketKey {
  std::string limit;
  KeyHash hash{};

  static BucketKey of(const LimitDescriptor& d) { return BucketKey{d.limit, d.key_hash}; }
  bool operator==(const BucketKey&) const = default;
};

struct BucketKeyHash {
  std::size_t operator()(const BucketKey& key) const noexcept {
    // The key hash is already uniform: 8 of its bytes, mixed with the name's hash.
    std::uint64_t word = 0;
    std::memcpy(&word, key.hash.data(), sizeof word);
    return static_cast<std::size_t>(word) ^ std::hash<std::string>{}(key.limit);
  }
};

// A bucket's tokens `elapsed_us` after it held `tokens`, refilled at the
// bucket's rate and capped at its capacity: what the store would hold if no
// one else had taken any.
double refilled_tokens(const LimitDescriptor& bucket, double tokens, std::int64_t elapsed_us);

// The state reported for a bucket holding `tokens` when a request of `cost`
// is decided locally: remaining, seconds until `cost` is there, until full.
LimitState local_state(const LimitDescriptor& bucket, double tokens, double cost, bool sufficient);

}  // namespace sluice
