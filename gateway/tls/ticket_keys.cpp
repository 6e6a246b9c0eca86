#include "gateway/tls/ticket_keys.hpp"

#include <algorithm>
#include <cstring>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

namespace sluice {
namespace {

// The slot of an SSL_CTX that points at its TicketKeys.
int context_slot() {
  static const int slot = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return slot;
}

template <std::size_t N>
void wipe(std::array<unsigned char, N>& bytes) {
  OPENSSL_cleanse(bytes.data(), bytes.size());
}

void wipe(TicketKeys::Key& key) {
  wipe(key.name);
  wipe(key.hmac);
  wipe(key.aes);
}

// OpenSSL's ticket callback: `enc` 1 seals a new ticket (fills `name` and
// `iv`), 0 opens one named `name`. Returns 1 (go on), 2 (opened with an older
// key: issue a new ticket), 0 (opening: no such key, a full handshake;
// sealing: no ticket, see TicketKeys::sealing) or -1 (an error).
int on_ticket(SSL* connection, unsigned char* name, unsigned char* iv, EVP_CIPHER_CTX* cipher,
              EVP_MAC_CTX* mac, int enc) {
  auto* keys =
      static_cast<TicketKeys*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(connection), context_slot()));
  if (!keys) return 0;
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  const auto now = TicketKeys::Clock::now();
  const int iv_bytes = EVP_CIPHER_get_iv_length(EVP_aes_256_cbc());
  if (enc == 1) {
    std::optional<TicketKeys::Key> key = keys->sealing(now);
    if (!key) return 0;
    int result = 1;
    std::memcpy(name, key->name.data(), key->name.size());
    if (RAND_bytes(iv, iv_bytes) != 1) {
      result = 0;
    } else if (EVP_EncryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, key->aes.data(), iv) != 1 ||
               EVP_MAC_init(mac, key->hmac.data(), key->hmac.size(), params) != 1) {
      result = -1;
    }
    wipe(*key);
    return result;
  }
  std::optional<TicketKeys::Opening> found =
      keys->opening(std::span<const unsigned char, TicketKeys::kNameBytes>(
                        name, TicketKeys::kNameBytes),
                    now);
  if (!found) return 0;  // unknown or too old: a full handshake
  int result = found->newest ? 1 : 2;
  if (EVP_MAC_init(mac, found->key.hmac.data(), found->key.hmac.size(), params) != 1 ||
      EVP_DecryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, found->key.aes.data(), iv) != 1) {
    result = -1;
  }
  wipe(found->key);
  return result;
}

}  // namespace

TicketKeys::TicketKeys(Clock::duration rotation, Clock::duration lifetime)
    : rotation_(rotation), lifetime_(lifetime) {}

TicketKeys::~TicketKeys() {
  for (const auto& held : keys_) wipe(held->key);
}

void TicketKeys::set_periods(Clock::duration rotation, Clock::duration lifetime) {
  std::lock_guard lock(mutex_);
  rotation_ = rotation;
  lifetime_ = lifetime;
}

std::optional<TicketKeys::Key> TicketKeys::sealing(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  forget_old(now);
  if (keys_.empty() || now - keys_.back()->made >= rotation_) {
    auto fresh = std::make_unique<Held>(Held{{}, now});
    Key& key = fresh->key;
    if (RAND_bytes(key.name.data(), key.name.size()) != 1 ||
        RAND_bytes(key.hmac.data(), key.hmac.size()) != 1 ||
        RAND_bytes(key.aes.data(), key.aes.size()) != 1) {
      wipe(key);
      return std::nullopt;
    }
    if (!keys_.empty()) keys_.back()->retired = now;
    keys_.push_back(std::move(fresh));
  }
  return keys_.back()->key;
}

std::optional<TicketKeys::Opening> TicketKeys::opening(
    std::span<const unsigned char, kNameBytes> name, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  forget_old(now);
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (std::equal(name.begin(), name.end(), keys_[i]->key.name.begin())) {
      return Opening{keys_[i]->key, i + 1 == keys_.size()};
    }
  }
  return std::nullopt;
}

std::size_t TicketKeys::size() {
  std::lock_guard lock(mutex_);
  return keys_.size();
}

void TicketKeys::forget_old(Clock::time_point now) {
  std::erase_if(keys_, [&](const std::unique_ptr<Held>& held) {
    if (held->retired == Clock::time_point::max() || now - held->retired < lifetime_ + kGrace) {
      return false;
    }
    wipe(held->key);
    return true;
  });
}

void TicketKeys::attach(SSL_CTX* context) {
  SSL_CTX_set_ex_data(context, context_slot(), this);
  SSL_CTX_set_tlsext_ticket_key_evp_cb(context, on_ticket);
}

}  // namespace sluice
