#include "middleware/auth/token_cache.hpp"

#include <openssl/sha.h>

#include <stdexcept>

namespace sluice {

// SHA256_Init and friends are deprecated in OpenSSL 3 in favour of EVP, whose
// digest context (and SHA256(), which goes through it) frees and makes its
// provider context again on every digest: an allocation per token. (The
// precompiled header has included OpenSSL already: OPENSSL_SUPPRESS_DEPRECATED
// would come too late.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TokenCache::Digest TokenCache::digest(std::string_view token) {
  Digest digest{};
  SHA256_CTX sha;
  if (SHA256_Init(&sha) != 1 || SHA256_Update(&sha, token.data(), token.size()) != 1 ||
      SHA256_Final(digest.data(), &sha) != 1) {
    throw std::runtime_error("SHA-256 failed");
  }
  return digest;
}
#pragma GCC diagnostic pop

const TokenCache::Entry* TokenCache::find(const Digest& digest) {
  const auto it = entries_.find(digest);
  if (it == entries_.end()) return nullptr;
  it->second.referenced = true;
  return &it->second.entry;
}

void TokenCache::erase(const Digest& digest) { entries_.erase(digest); }

void TokenCache::insert(const Digest& digest, Entry entry, std::size_t max_entries) {
  if (max_entries == 0) return;
  entries_.erase(digest);
  while (entries_.size() >= max_entries && !ring_.empty()) evict_one();
  const std::uint64_t sequence = next_sequence_++;
  entries_.emplace(digest, Slot{std::move(entry), sequence, false});
  ring_.push_back(Hand{digest, sequence});
  if (ring_.size() > 2 * entries_.size() + 16) {
    std::erase_if(ring_, [this](const Hand& hand) {
      const auto it = entries_.find(hand.digest);
      return it == entries_.end() || it->second.sequence != hand.sequence;
    });
  }
}

// The clock hand moves on from the oldest occurrence: a used entry gets a
// second chance (its bit cleared, back at the end), an unused one goes.
void TokenCache::evict_one() {
  while (!ring_.empty()) {
    const Hand hand = ring_.front();
    ring_.pop_front();
    const auto it = entries_.find(hand.digest);
    if (it == entries_.end() || it->second.sequence != hand.sequence) continue;  // stale
    if (it->second.referenced) {
      it->second.referenced = false;
      ring_.push_back(hand);
      continue;
    }
    entries_.erase(it);
    return;
  }
}

void TokenCache::clear() {
  entries_.clear();
  ring_.clear();
}

}  // namespace sluice
