// JSON Web Keys (RFC 7517) read into OpenSSL public keys, and the one
// signature check of a JWS (RFC 7515/7518) against such a key or an HMAC
// secret. A key set is built once (from a JWKS document, at load or when a
// JWKS URL answers) and then only read, from any thread. Pure: no I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// The JWS algorithms Sluice verifies. "none" is never one of them.
enum class JwsAlgorithm : std::uint8_t {
  kRs256, kRs384, kRs512, kPs256, kPs384, kPs512, kEs256, kEs384, kEdDsa, kHs256, kHs384, kHs512
};
std::optional<JwsAlgorithm> jws_algorithm_named(std::string_view name);
std::string_view jws_algorithm_name(JwsAlgorithm alg);
bool is_hmac(JwsAlgorithm alg);

// One public key of a set.
struct Jwk {
  std::string kid;                      // empty: none given
  std::optional<JwsAlgorithm> alg;      // the key's own "alg", when it names one
  // The algorithms this key can verify, by its type and curve: RSA (RS*, PS*),
  // EC P-256 (ES256), P-384 (ES384), OKP Ed25519 (EdDSA).
  std::vector<JwsAlgorithm> can_verify;
  std::shared_ptr<void> key;            // the OpenSSL EVP_PKEY
};

// Whether `key` verifies `alg`: its type and curve allow it, and its own
// alg, when given, is `alg`.
bool jwk_can_verify(const Jwk& key, JwsAlgorithm alg);

struct JwkSet {
  std::vector<Jwk> keys;
  // The key of `kid` that can verify `alg` (its own alg, when given, must be
  // `alg`); null when none.
  const Jwk* find(std::string_view kid, JwsAlgorithm alg) const;
};

// Reads a JWKS document ({"keys": [...]}). Keys whose use is not "sig", or
// whose type Sluice does not verify with, are skipped; an RSA key under 2048
// bits is skipped too. `error` says why nothing was read (bad JSON, no usable
// key, a key field that is not base64url).
struct JwkSetResult {
  std::shared_ptr<const JwkSet> set;  // null on error
  std::string error;
  std::size_t skipped = 0;  // keys left out
};
JwkSetResult parse_jwk_set(std::string_view json);

// Whether `signature` is `alg`'s signature of `signing_input` under `key`.
// For ES256/ES384 the signature is the JWS form (R || S, fixed width).
bool jws_verify(JwsAlgorithm alg, const Jwk& key, std::string_view signing_input,
                std::string_view signature);
// The same with an HMAC secret (HS256/384/512), compared in constant time.
bool jws_verify_hmac(JwsAlgorithm alg, std::string_view secret, std::string_view signing_input,
                     std::string_view signature);

// base64url without padding (RFC 7515 section 2) to bytes; nullopt when a
// character is outside the alphabet, padding is present or the length is
// impossible.
std::optional<std::string> base64url_decode(std::string_view text);

}  // namespace sluice
