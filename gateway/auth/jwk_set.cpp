#include "gateway/auth/jwk_set.hpp"

#include <algorithm>
#include <array>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

#include <nlohmann/json.hpp>

namespace sluice {
namespace {

constexpr std::size_t kMaxKeys = 64;  // a JWKS of more is not an identity provider's
constexpr int kMinRsaBits = 2048;

struct Named {
  std::string_view name;
  JwsAlgorithm alg;
};
constexpr Named kAlgorithms[] = {
    {"RS256", JwsAlgorithm::kRs256}, {"RS384", JwsAlgorithm::kRs384},
    {"RS512", JwsAlgorithm::kRs512}, {"PS256", JwsAlgorithm::kPs256},
    {"PS384", JwsAlgorithm::kPs384}, {"PS512", JwsAlgorithm::kPs512},
    {"ES256", JwsAlgorithm::kEs256}, {"ES384", JwsAlgorithm::kEs384},
    {"EdDSA", JwsAlgorithm::kEdDsa}, {"HS256", JwsAlgorithm::kHs256},
    {"HS384", JwsAlgorithm::kHs384}, {"HS512", JwsAlgorithm::kHs512}};

const EVP_MD* digest_of(JwsAlgorithm alg) {
  switch (alg) {
    case JwsAlgorithm::kRs256:
    case JwsAlgorithm::kPs256:
    case JwsAlgorithm::kEs256:
    case JwsAlgorithm::kHs256:
      return EVP_sha256();
    case JwsAlgorithm::kRs384:
    case JwsAlgorithm::kPs384:
    case JwsAlgorithm::kEs384:
    case JwsAlgorithm::kHs384:
      return EVP_sha384();
    case JwsAlgorithm::kRs512:
    case JwsAlgorithm::kPs512:
    case JwsAlgorithm::kHs512:
      return EVP_sha512();
    case JwsAlgorithm::kEdDsa:
      return nullptr;  // Ed25519 hashes by itself
  }
  return nullptr;
}

std::shared_ptr<void> own(EVP_PKEY* key) {
  return std::shared_ptr<void>(key, [](void* p) { EVP_PKEY_free(static_cast<EVP_PKEY*>(p)); });
}

using Bignum = std::unique_ptr<BIGNUM, decltype(&BN_free)>;

Bignum bignum_of(const std::string& bytes) {
  return Bignum(BN_bin2bn(reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()), nullptr),
                &BN_free);
}

// A public key from parameters (RSA n/e, EC group and point) through OpenSSL 3's builder.
EVP_PKEY* from_params(const char* type, OSSL_PARAM* params) {
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr), &EVP_PKEY_CTX_free);
  EVP_PKEY* key = nullptr;
  if (!ctx || EVP_PKEY_fromdata_init(ctx.get()) <= 0 ||
      EVP_PKEY_fromdata(ctx.get(), &key, EVP_PKEY_PUBLIC_KEY, params) <= 0) {
    return nullptr;
  }
  return key;
}

std::optional<std::string> member(const nlohmann::json& jwk, const char* name) {
  const auto it = jwk.find(name);
  if (it == jwk.end() || !it->is_string()) return std::nullopt;
  return base64url_decode(it->get<std::string>());
}

// The key of one JWK, or why not (empty error and null key: skipped quietly).
std::string read_key(const nlohmann::json& jwk, Jwk& out) {
  const std::string kty = jwk.value("kty", "");
  if (kty == "RSA") {
    const auto n = member(jwk, "n");
    const auto e = member(jwk, "e");
    if (!n || !e || n->empty() || e->empty()) return "an RSA key without base64url n and e";
    Bignum bn_n = bignum_of(*n), bn_e = bignum_of(*e);
    if (BN_num_bits(bn_n.get()) < kMinRsaBits) return {};  // too weak: skipped
    OSSL_PARAM_BLD* build = OSSL_PARAM_BLD_new();
    OSSL_PARAM* params = nullptr;
    if (build && OSSL_PARAM_BLD_push_BN(build, OSSL_PKEY_PARAM_RSA_N, bn_n.get()) == 1 &&
        OSSL_PARAM_BLD_push_BN(build, OSSL_PKEY_PARAM_RSA_E, bn_e.get()) == 1) {
      params = OSSL_PARAM_BLD_to_param(build);
    }
    EVP_PKEY* key = params ? from_params("RSA", params) : nullptr;
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(build);
    if (!key) return "an RSA key OpenSSL refuses";
    out.key = own(key);
    out.can_verify = {JwsAlgorithm::kRs256, JwsAlgorithm::kRs384, JwsAlgorithm::kRs512,
                      JwsAlgorithm::kPs256, JwsAlgorithm::kPs384, JwsAlgorithm::kPs512};
    return {};
  }
  if (kty == "EC") {
    const std::string crv = jwk.value("crv", "");
    const char* group = crv == "P-256" ? "prime256v1" : crv == "P-384" ? "secp384r1" : nullptr;
    if (!group) return {};  // another curve: skipped
    const std::size_t width = crv == "P-256" ? 32 : 48;
    auto x = member(jwk, "x");
    auto y = member(jwk, "y");
    if (!x || !y || x->empty() || y->empty() || x->size() > width || y->size() > width) {
      return "an EC key without base64url x and y of its curve's size";
    }
    // RFC 7518 wants each coordinate at full width; some writers drop a
    // leading zero byte (a key in 128): put it back.
    x->insert(0, width - x->size(), '\0');
    y->insert(0, width - y->size(), '\0');
    std::string point = "\x04" + *x + *y;  // uncompressed
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, const_cast<char*>(group), 0),
        OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()),
        OSSL_PARAM_construct_end()};
    EVP_PKEY* key = from_params("EC", params);
    if (!key) return "an EC key whose point is not on its curve";
    out.key = own(key);
    out.can_verify = {crv == "P-256" ? JwsAlgorithm::kEs256 : JwsAlgorithm::kEs384};
    return {};
  }
  if (kty == "OKP") {
    if (jwk.value("crv", "") != "Ed25519") return {};
    const auto x = member(jwk, "x");
    if (!x || x->size() != 32) return "an Ed25519 key without a 32-byte base64url x";
    EVP_PKEY* key = EVP_PKEY_new_raw_public_key(
        EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(x->data()), x->size());
    if (!key) return "an Ed25519 key OpenSSL refuses";
    out.key = own(key);
    out.can_verify = {JwsAlgorithm::kEdDsa};
    return {};
  }
  return {};  // "oct" (a secret has no place in a published set) and others: skipped
}

// R || S (each `width` bytes) as the DER ECDSA-Sig-Value OpenSSL verifies.
std::optional<std::string> ecdsa_der(std::string_view signature, std::size_t width) {
  if (signature.size() != 2 * width) return std::nullopt;
  ECDSA_SIG* sig = ECDSA_SIG_new();
  BIGNUM* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(signature.data()),
                        static_cast<int>(width), nullptr);
  BIGNUM* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(signature.data() + width),
                        static_cast<int>(width), nullptr);
  if (!sig || !r || !s || ECDSA_SIG_set0(sig, r, s) != 1) {
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(sig);
    return std::nullopt;
  }
  unsigned char* der = nullptr;
  const int n = i2d_ECDSA_SIG(sig, &der);
  ECDSA_SIG_free(sig);
  if (n <= 0) return std::nullopt;
  std::string out(reinterpret_cast<char*>(der), static_cast<std::size_t>(n));
  OPENSSL_free(der);
  return out;
}

}  // namespace

JwkSetResult parse_jwk_set_checked(std::string_view json);

std::optional<JwsAlgorithm> jws_algorithm_named(std::string_view name) {
  for (const auto& a : kAlgorithms) {
    if (a.name == name) return a.alg;
  }
  return std::nullopt;
}

std::string_view jws_algorithm_name(JwsAlgorithm alg) {
  for (const auto& a : kAlgorithms) {
    if (a.alg == alg) return a.name;
  }
  return "?";
}

bool is_hmac(JwsAlgorithm alg) {
  return alg == JwsAlgorithm::kHs256 || alg == JwsAlgorithm::kHs384 || alg == JwsAlgorithm::kHs512;
}

bool jwk_can_verify(const Jwk& key, JwsAlgorithm alg) {
  if (key.alg && *key.alg != alg) return false;
  return std::find(key.can_verify.begin(), key.can_verify.end(), alg) != key.can_verify.end();
}

const Jwk* JwkSet::find(std::string_view kid, JwsAlgorithm alg) const {
  for (const Jwk& key : keys) {
    if (key.kid == kid && jwk_can_verify(key, alg)) return &key;
  }
  return nullptr;
}

JwkSetResult parse_jwk_set(std::string_view json) {
  // A member of the wrong type ("kty": 1) throws from nlohmann's accessors:
  // the document is refused, as any other broken one.
  try {
    return parse_jwk_set_checked(json);
  } catch (const nlohmann::json::exception&) {
    JwkSetResult result;
    result.error = "a key member of the wrong JSON type";
    return result;
  }
}

JwkSetResult parse_jwk_set_checked(std::string_view json) {
  JwkSetResult result;
  const auto doc = nlohmann::json::parse(json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    result.error = "not a JSON object";
    return result;
  }
  const auto keys = doc.find("keys");
  if (keys == doc.end() || !keys->is_array()) {
    result.error = "no \"keys\" list";
    return result;
  }
  if (keys->size() > kMaxKeys) {
    result.error = "more than " + std::to_string(kMaxKeys) + " keys";
    return result;
  }
  auto set = std::make_shared<JwkSet>();
  for (const auto& jwk : *keys) {
    if (!jwk.is_object()) {
      result.error = "a key that is not a JSON object";
      return result;
    }
    if (jwk.contains("use") && jwk["use"] != "sig") {
      ++result.skipped;
      continue;
    }
    Jwk key;
    if (const auto kid = jwk.find("kid"); kid != jwk.end() && kid->is_string()) {
      key.kid = kid->get<std::string>();
    }
    if (const auto alg = jwk.find("alg"); alg != jwk.end() && alg->is_string()) {
      key.alg = jws_algorithm_named(alg->get<std::string>());
      if (!key.alg || is_hmac(*key.alg)) {  // an algorithm Sluice does not verify with keys
        ++result.skipped;
        continue;
      }
    }
    if (std::string why = read_key(jwk, key); !why.empty()) {
      result.error = "key " + (key.kid.empty() ? std::string("without kid") : "\"" + key.kid + "\"") +
                     ": " + why;
      return result;
    }
    if (!key.key) {
      ++result.skipped;
      continue;
    }
    set->keys.push_back(std::move(key));
  }
  if (set->keys.empty()) {
    result.error = "no key Sluice can verify with (RSA of 2048 bits or more, EC P-256 or P-384, "
                   "Ed25519)";
    return result;
  }
  result.set = std::move(set);
  return result;
}

bool jws_verify(JwsAlgorithm alg, const Jwk& key, std::string_view signing_input,
                std::string_view signature) {
  if (is_hmac(alg) || !key.key) return false;
  EVP_PKEY* pkey = static_cast<EVP_PKEY*>(key.key.get());
  std::string der;
  if (alg == JwsAlgorithm::kEs256 || alg == JwsAlgorithm::kEs384) {
    auto converted = ecdsa_der(signature, alg == JwsAlgorithm::kEs256 ? 32 : 48);
    if (!converted) return false;
    der = std::move(*converted);
    signature = der;
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_PKEY_CTX* pctx = nullptr;
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), &pctx, digest_of(alg), nullptr, pkey) <= 0) {
    return false;
  }
  if (alg == JwsAlgorithm::kPs256 || alg == JwsAlgorithm::kPs384 || alg == JwsAlgorithm::kPs512) {
    if (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) <= 0 ||
        EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) <= 0) {
      return false;
    }
  } else if (alg == JwsAlgorithm::kRs256 || alg == JwsAlgorithm::kRs384 ||
             alg == JwsAlgorithm::kRs512) {
    if (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) <= 0) return false;
  }
  return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                          signature.size(),
                          reinterpret_cast<const unsigned char*>(signing_input.data()),
                          signing_input.size()) == 1;
}

bool jws_verify_hmac(JwsAlgorithm alg, std::string_view secret, std::string_view signing_input,
                     std::string_view signature) {
  if (!is_hmac(alg) || secret.empty()) return false;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  if (!HMAC(digest_of(alg), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size(),
            mac, &mac_len)) {
    return false;
  }
  return signature.size() == mac_len && CRYPTO_memcmp(mac, signature.data(), mac_len) == 0;
}

std::optional<std::string> base64url_decode(std::string_view text) {
  static constexpr auto kValue = [] {
    std::array<signed char, 256> table{};
    table.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(alphabet[i])] = static_cast<signed char>(i);
    return table;
  }();
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t bits = 0;
  int count = 0;
  for (const char c : text) {
    const int v = kValue[static_cast<unsigned char>(c)];
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xff));
    }
  }
  // The bits left over must be zero (one encoding per byte string).
  if ((bits & ((1u << count) - 1)) != 0) return std::nullopt;
  return out;
}

}  // namespace sluice
