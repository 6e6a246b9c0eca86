// The key hash of a limit's value (SHA-256, or HMAC-SHA-256 under the key
// secret, truncated to 128 bits), and the per-worker memo of the limiter's.
// SHA256_Init and friends are deprecated in OpenSSL 3 in favour of EVP,
// whose contexts cannot be made ready or copied without allocating. (First,
// so that no header includes OpenSSL's before it is defined.)
#define OPENSSL_SUPPRESS_DEPRECATED

#include "middleware/ratelimit/descriptors.hpp"

#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <functional>
#include <string>

namespace sluice {

namespace {

// SHA-256 of `input` into `out` (32 bytes), on a state on the stack: the
// EVP interface (and SHA256(), which goes through it in OpenSSL 3) frees and
// makes its provider context again on every digest, an allocation each.
bool sha256(std::string_view input, unsigned char* out) {
  SHA256_CTX sha;
  return SHA256_Init(&sha) == 1 && SHA256_Update(&sha, input.data(), input.size()) == 1 &&
         SHA256_Final(out, &sha) == 1;
}

// HMAC-SHA-256 (RFC 2104) of `input` under `secret` into `out` (32 bytes).
// The states after the key's inner and outer pads are computed once per
// thread and secret (a reload changes it), and copied for every input: the
// SHA-256 state is a plain struct, so this costs no allocation, where
// OpenSSL's EVP_MAC duplicates its digest contexts on every use.
bool hmac_sha256(std::string_view input, std::string_view secret, unsigned char* out) {
  struct Keyed {
    std::string secret;  // empty = not keyed yet
    SHA256_CTX inner;
    SHA256_CTX outer;
  };
  thread_local Keyed keyed{};
  if (keyed.secret != secret) {
    keyed.secret.clear();
    std::array<unsigned char, SHA256_CBLOCK> block{};  // the key, hashed first if too long
    if (secret.size() > block.size()) {
      if (!sha256(secret, block.data())) return false;
    } else {
      std::copy(secret.begin(), secret.end(), block.begin());
    }
    std::array<unsigned char, SHA256_CBLOCK> pad;
    for (std::size_t i = 0; i < pad.size(); ++i) pad[i] = block[i] ^ 0x36;
    if (SHA256_Init(&keyed.inner) != 1 ||
        SHA256_Update(&keyed.inner, pad.data(), pad.size()) != 1) {
      return false;
    }
    for (std::size_t i = 0; i < pad.size(); ++i) pad[i] = block[i] ^ 0x5c;
    if (SHA256_Init(&keyed.outer) != 1 ||
        SHA256_Update(&keyed.outer, pad.data(), pad.size()) != 1) {
      return false;
    }
    keyed.secret.assign(secret);
  }
  std::array<unsigned char, SHA256_DIGEST_LENGTH> inner_digest;
  SHA256_CTX sha = keyed.inner;
  if (SHA256_Update(&sha, input.data(), input.size()) != 1 ||
      SHA256_Final(inner_digest.data(), &sha) != 1) {
    return false;
  }
  sha = keyed.outer;
  return SHA256_Update(&sha, inner_digest.data(), inner_digest.size()) == 1 &&
         SHA256_Final(out, &sha) == 1;
}

// The digest; `ok` false when OpenSSL failed (the hash is then all zero).
KeyHash compute_key_hash(std::string_view hash_input, std::string_view secret, bool& ok) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest{};
  ok = secret.empty() ? sha256(hash_input, digest.data())
                      : hmac_sha256(hash_input, secret, digest.data());
  // These do not fail in practice; a zero digest would still yield a
  // well-formed bucket (and no request data in it).
  if (!ok) digest.fill(0);
  KeyHash hash;
  std::copy_n(digest.begin(), hash.size(), hash.begin());
  return hash;
}

// The last bucket digests of a worker, by input: a kept-alive client sends
// the same key value (its address, its API key) request after request, and a
// digest costs about 2,000 instructions and an allocation in OpenSSL.
// Direct-mapped, inputs of at most kMemoInputBytes kept (under 16 KB per
// thread), emptied when the secret changes (a reload). A failed digest is
// never kept. Only the limiter's own key values pass through it (the admin's
// tokens and the consumer store's keys are hashed without it).
class KeyHashMemo {
 public:
  static constexpr std::size_t kEntries = 64;
  static constexpr std::size_t kMemoInputBytes = 128;

  KeyHash get(std::string_view input, std::string_view secret) {
    bool ok = false;
    if (input.size() > kMemoInputBytes) return compute_key_hash(input, secret, ok);
    if (secret != secret_) {
      for (Entry& e : entries_) e.used = false;
      secret_.assign(secret);
    }
    Entry& e = entries_[std::hash<std::string_view>{}(input) % kEntries];
    if (e.used && e.input == input) return e.hash;
    e.used = false;  // until input and hash agree again
    const KeyHash hash = compute_key_hash(input, secret, ok);
    if (!ok) return hash;
    e.input.assign(input);
    e.hash = hash;
    e.used = true;
    return hash;
  }

 private:
  struct Entry {
    std::string input;
    KeyHash hash{};
    bool used = false;
  };
  std::array<Entry, kEntries> entries_;
  std::string secret_;
};

}  // namespace

KeyHash key_hash(std::string_view hash_input, std::string_view secret) {
  bool ok = false;
  return compute_key_hash(hash_input, secret, ok);
}

KeyHash bucket_key_hash(std::string_view hash_input, std::string_view secret) {
  thread_local KeyHashMemo memo;
  return memo.get(hash_input, secret);
}

}  // namespace sluice
