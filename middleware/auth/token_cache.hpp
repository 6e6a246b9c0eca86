// A worker's verified JSON Web Tokens, keyed by the token's SHA-256 (the
// token itself is not kept), bounded by an entry count. Eviction is second
// chance (CLOCK): a hit only sets a bit in the entry it has just read, so a
// cached token costs its digest and one hash lookup; a least-recently-used
// list would touch two more nodes per hit. Not thread-safe: one per worker.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice {

class TokenCache {
 public:
  using Digest = std::array<unsigned char, 32>;
  using Claims = std::vector<std::pair<std::string, std::string>>;
  struct Entry {
    std::int64_t expires_at = 0;        // seconds since the epoch: unusable from then on
    std::size_t provider = 0;           // the index of the provider that verified it
    std::uint64_t keys_generation = 0;  // a jwks_url provider's keys it was verified with
    std::shared_ptr<const Claims> claims;
  };

  // The token's SHA-256.
  static Digest digest(std::string_view token);
  // The entry of `digest`, marked as used; null: none.
  const Entry* find(const Digest& digest);
  void erase(const Digest& digest);
  // Kept, evicting while the cache holds `max_entries` or more (0: not kept).
  void insert(const Digest& digest, Entry entry, std::size_t max_entries);
  void clear();
  std::size_t size() const { return entries_.size(); }

 private:
  struct DigestHash {
    std::size_t operator()(const Digest& d) const noexcept {
      std::size_t h = 0;
      std::memcpy(&h, d.data(), sizeof h);  // a digest's bytes are spread already
      return h;
    }
  };
  struct Slot {
    Entry entry;
    std::uint64_t sequence = 0;  // which of the ring's occurrences is this entry's
    bool referenced = false;     // used since the clock hand last passed
  };
  struct Hand {
    Digest digest;
    std::uint64_t sequence;
  };

  void evict_one();

  std::unordered_map<Digest, Slot, DigestHash> entries_;
  // Insertion order; an occurrence whose entry is gone or was inserted again
  // is stale and skipped. Compacted when stale ones would outnumber the live.
  std::deque<Hand> ring_;
  std::uint64_t next_sequence_ = 0;
};

}  // namespace sluice
