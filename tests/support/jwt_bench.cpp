// What verifying a JSON Web Token costs, cold: each algorithm's token checked
// by verify_jwt (decoding, JSON, signature, claims) with keys made here, and
// what a cached token costs instead: its SHA-256 and a lookup in a worker's
// cache holding 10,000 tokens.
//
//   sluice-jwt-bench [ITERATIONS]      (default 2000)
//
// Prints one line of JSON. Timing is for scripts/bench, never for tests.
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rsa.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gateway/auth/jwk_set.hpp"
#include "tests/support/base64url.hpp"
#include "middleware/auth/jwt_verifier.hpp"
#include "middleware/auth/token_cache.hpp"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

std::string b64url(std::string_view bytes) { return testing::base64url(bytes); }

std::string sign(EVP_PKEY* key, const EVP_MD* md, std::string_view input, bool pss, int ec_width) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_PKEY_CTX* pctx = nullptr;
  EVP_DigestSignInit(ctx.get(), &pctx, md, nullptr, key);
  if (pss) {
    EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING);
    EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST);
  }
  std::size_t len = 0;
  EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()),
                 input.size());
  std::string sig(len, '\0');
  EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                 reinterpret_cast<const unsigned char*>(input.data()), input.size());
  sig.resize(len);
  if (ec_width == 0) return sig;
  // DER ECDSA-Sig-Value to JWS's R || S.
  const unsigned char* p = reinterpret_cast<const unsigned char*>(sig.data());
  ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(sig.size()));
  std::string raw(static_cast<std::size_t>(2 * ec_width), '\0');
  BN_bn2binpad(ECDSA_SIG_get0_r(es), reinterpret_cast<unsigned char*>(raw.data()), ec_width);
  BN_bn2binpad(ECDSA_SIG_get0_s(es), reinterpret_cast<unsigned char*>(raw.data()) + ec_width,
               ec_width);
  ECDSA_SIG_free(es);
  return raw;
}

struct Case {
  const char* alg;
  JwsAlgorithm id;
  EVP_PKEY* key;
  const EVP_MD* md;
  bool pss;
  int ec_width;
};

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  const std::int64_t now = 1'800'000'000;
  EVP_PKEY* rsa = EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", static_cast<size_t>(2048));
  EVP_PKEY* p256 = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  EVP_PKEY* ed = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  const std::string secret = "0123456789abcdef0123456789abcdef";
  const Case cases[] = {
      {"RS256", JwsAlgorithm::kRs256, rsa, EVP_sha256(), false, 0},
      {"PS256", JwsAlgorithm::kPs256, rsa, EVP_sha256(), true, 0},
      {"ES256", JwsAlgorithm::kEs256, p256, EVP_sha256(), false, 32},
      {"EdDSA", JwsAlgorithm::kEdDsa, ed, nullptr, false, 0},
      {"HS256", JwsAlgorithm::kHs256, nullptr, EVP_sha256(), false, 0},
  };
  const std::string payload = R"({"iss":"https://idp.test/","aud":"orders","sub":"user-12345",)"
                              R"("org":{"id":"acme"},"plan":"pro","iat":)" + std::to_string(now) +
                              R"(,"exp":)" + std::to_string(now + 3600) + "}";
  std::printf("{");
  bool first = true;
  std::size_t token_size = 0;
  for (const Case& c : cases) {
    AuthConfig auth;
    JwtProvider provider;
    provider.name = "bench";
    provider.issuer = "https://idp.test/";
    provider.audiences = {"orders"};
    const std::string header = std::string(R"({"alg":")") + c.alg + R"(","kid":"k"})";
    const std::string input = b64url(header) + "." + b64url(payload);
    std::string signature;
    if (c.key) {
      auto set = std::make_shared<JwkSet>();
      Jwk jwk;
      jwk.kid = "k";
      jwk.can_verify = {c.id};
      EVP_PKEY_up_ref(c.key);
      jwk.key = std::shared_ptr<void>(c.key, [](void* k) { EVP_PKEY_free(static_cast<EVP_PKEY*>(k)); });
      set->keys.push_back(std::move(jwk));
      provider.keys = std::move(set);
      signature = sign(c.key, c.md, input, c.pss, c.ec_width);
    } else {
      provider.secret = secret;
      unsigned char mac[32];
      unsigned int len = 0;
      HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &len);
      signature.assign(reinterpret_cast<char*>(mac), len);
    }
    auth.jwt.push_back(std::move(provider));
    auth.claim_paths = {"sub", "org.id", "plan"};
    const std::string token = input + "." + b64url(signature);
    token_size = token.size();
    if (verify_jwt(token, auth, now).error != JwtError::kNone) {
      std::fprintf(stderr, "%s: the token does not verify\n", c.alg);
      return 1;
    }
    const auto start = Clock::now();
    std::size_t ok = 0;
    for (int i = 0; i < iterations; ++i) ok += verify_jwt(token, auth, now).error == JwtError::kNone;
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                      iterations;
    std::printf("%s\"%s_us\": %.2f", first ? "" : ", ", c.alg, us);
    first = false;
    if (ok != static_cast<std::size_t>(iterations)) return 1;
  }
  // The cached path's own cost: the token's SHA-256 and the lookup, among
  // 10,000 cached tokens of the same size, each looked up in turn.
  constexpr int kCached = 10'000;
  TokenCache cache;
  std::vector<std::string> tokens;
  for (int i = 0; i < kCached; ++i) {
    std::string t(token_size, 'x');
    const std::string n = std::to_string(i);
    t.replace(t.size() - n.size(), n.size(), n);
    cache.insert(TokenCache::digest(t), {now + 3600, 0, 0, nullptr}, kCached);
    tokens.push_back(std::move(t));
  }
  const int lookups = iterations * 10;
  std::size_t hits = 0;
  const auto start = Clock::now();
  for (int i = 0; i < lookups; ++i) {
    hits += cache.find(TokenCache::digest(tokens[static_cast<std::size_t>(i) % kCached])) != nullptr;
  }
  const double cached_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                           lookups;
  if (hits != static_cast<std::size_t>(lookups)) return 1;
  std::printf(", \"token_bytes\": %zu, \"cached_us\": %.3f}\n", token_size, cached_us);
  EVP_PKEY_free(rsa);
  EVP_PKEY_free(p256);
  EVP_PKEY_free(ed);
  return 0;
}
