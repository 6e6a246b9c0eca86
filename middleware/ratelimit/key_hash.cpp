// The key hash of a limit's value (SHA-256, or HMAC-SHA-256 under the key
// secret, truncated to 128 bits), and the per-worker memo of the limiter's.
#include "middleware/ratelimit/descriptors.hpp"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <algorithm>
#include <array>
#include <functional>
#include <string>

namespace sluice {

namespace {

// The digest; `ok` false when OpenSSL failed (the hash is then all zero).
KeyHash compute_key_hash(std::string_view hash_input, std::string_view secret, bool& ok) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  ok = false;
  if (secret.empty()) {
    // The digest and a context are fetched once per thread: EVP_Digest would
    // look the algorithm up and allocate a context on every call.
    struct Sha256 {
      EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
      EVP_MD_CTX* ctx = EVP_MD_CTX_new();
      ~Sha256() {
        EVP_MD_CTX_free(ctx);
        EVP_MD_free(md);
      }
    };
    thread_local Sha256 sha;
    unsigned int size = 0;
    ok = sha.md && sha.ctx && EVP_DigestInit_ex2(sha.ctx, sha.md, nullptr) == 1 &&
         EVP_DigestUpdate(sha.ctx, hash_input.data(), hash_input.size()) == 1 &&
         EVP_DigestFinal_ex(sha.ctx, digest.data(), &size) == 1;
  } else {
    // HMAC-SHA-256. The MAC, a context and its digest are set up once per
    // thread, and the context is re-keyed only when the secret changes (a
    // reload): a digest parameter on every init would fetch SHA-256 from the
    // provider store, under its lock, on every request.
    struct Hmac {
      EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
      EVP_MAC_CTX* ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
      std::string key;  // the secret ctx is keyed with; empty = not keyed yet
      ~Hmac() {
        EVP_MAC_CTX_free(ctx);
        EVP_MAC_free(mac);
      }
    };
    thread_local Hmac hmac;
    const auto* data = reinterpret_cast<const unsigned char*>(hash_input.data());
    std::size_t size = 0;
    if (hmac.ctx && hmac.key != secret) {
      char digest_name[] = "SHA256";
      const OSSL_PARAM params[] = {
          OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
          OSSL_PARAM_construct_end()};
      hmac.key.clear();
      if (EVP_MAC_init(hmac.ctx, reinterpret_cast<const unsigned char*>(secret.data()),
                       secret.size(), params) == 1) {
        hmac.key = secret;
      }
    }
    // A null key re-starts the MAC with the key it already has.
    ok = !hmac.key.empty() && EVP_MAC_init(hmac.ctx, nullptr, 0, nullptr) == 1 &&
         EVP_MAC_update(hmac.ctx, data, hash_input.size()) == 1 &&
         EVP_MAC_final(hmac.ctx, digest.data(), &size, digest.size()) == 1;
  }
  // These only fail on allocation failure; a zero digest then still yields a
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
