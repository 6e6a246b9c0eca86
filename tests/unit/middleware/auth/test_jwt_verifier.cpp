// Tokens checked against providers with a fixed clock: the HMAC provider's
// tokens are made here, the date claims and audiences at their edges, and
// what is kept of the claims.
#include <catch2/catch.hpp>

#include <openssl/hmac.h>

#include "gateway/auth/jwk_set.hpp"
#include "support/base64url.hpp"
#include "middleware/auth/jwt_verifier.hpp"

namespace sluice {
namespace {

constexpr std::int64_t kNow = 1'800'000'000;
const std::string kSecret = "0123456789abcdef0123456789abcdef";

std::string b64url(std::string_view bytes) { return testing::base64url(bytes); }

std::string hs256(const std::string& header, const std::string& payload,
                  const std::string& secret = kSecret) {
  const std::string input = b64url(header) + "." + b64url(payload);
  unsigned char mac[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &len);
  return input + "." + b64url(std::string(reinterpret_cast<char*>(mac), len));
}

AuthConfig hmac_auth() {
  AuthConfig auth;
  JwtProvider p;
  p.name = "svc";
  p.issuer = "https://svc.test/";
  p.secret = kSecret;
  p.audiences = {"orders"};
  p.clock_skew_seconds = 30;
  auth.jwt.push_back(p);
  auth.claim_paths = {"sub", "org.id", "tier", "admin", "groups"};
  return auth;
}

std::string payload_with(const std::string& extra) {
  return R"({"iss":"https://svc.test/","aud":["other","orders"],"sub":"alice","exp":)" +
         std::to_string(kNow + 60) + extra + "}";
}

const std::string kHeader = R"({"alg":"HS256","typ":"JWT"})";

}  // namespace

TEST_CASE("jwt: a valid HMAC token and the claims kept", "[jwt]") {
  const AuthConfig auth = hmac_auth();
  const auto v = verify_jwt(
      hs256(kHeader, payload_with(R"(,"org":{"id":42},"tier":"pro","admin":true,"groups":["a"],"x":"y")")),
      auth, kNow);
  REQUIRE(v.error == JwtError::kNone);
  CHECK(v.provider == 0);
  CHECK(v.expires_at == kNow + 60);
  using Claims = std::vector<std::pair<std::string, std::string>>;
  // A list is not a value; claims the configuration does not read are not kept.
  CHECK(v.claims == Claims{{"sub", "alice"}, {"org.id", "42"}, {"tier", "pro"}, {"admin", "true"}});
}

TEST_CASE("jwt: dates at their edges, within the skew", "[jwt]") {
  const AuthConfig auth = hmac_auth();
  const auto with = [&](const std::string& claims) {
    return verify_jwt(hs256(kHeader, R"({"iss":"https://svc.test/","aud":"orders")" + claims + "}"),
                      auth, kNow)
        .error;
  };
  const auto at = [](std::int64_t t) { return std::to_string(t); };
  CHECK(with(",\"exp\":" + at(kNow - 29)) == JwtError::kNone);  // within 30 s of skew
  CHECK(with(",\"exp\":" + at(kNow - 30)) == JwtError::kExpired);
  CHECK(with("") == JwtError::kMalformed);  // no exp
  CHECK(with(",\"exp\":\"soon\"") == JwtError::kMalformed);
  CHECK(with(",\"exp\":" + at(kNow + 60) + ",\"nbf\":" + at(kNow + 30)) == JwtError::kNone);
  CHECK(with(",\"exp\":" + at(kNow + 60) + ",\"nbf\":" + at(kNow + 31)) == JwtError::kNotYetValid);
  CHECK(with(",\"exp\":" + at(kNow + 60) + ",\"iat\":" + at(kNow + 31)) == JwtError::kNotYetValid);
}

TEST_CASE("jwt: what is refused, and why", "[jwt]") {
  AuthConfig auth = hmac_auth();
  const std::string payload = payload_with("");
  CHECK(verify_jwt(hs256(kHeader, payload, "another secret of thirty-two bytes!"), auth, kNow)
            .error == JwtError::kSignature);
  CHECK(verify_jwt(hs256(R"({"alg":"none"})", payload), auth, kNow).error == JwtError::kAlgorithm);
  CHECK(verify_jwt(hs256(R"({"typ":"JWT"})", payload), auth, kNow).error == JwtError::kAlgorithm);
  CHECK(verify_jwt(hs256(R"({"alg":"HS256","crit":["b64"]})", payload), auth, kNow).error ==
        JwtError::kCritical);
  CHECK(verify_jwt(hs256(kHeader, R"({"iss":"https://other/","exp":1})"), auth, kNow).error ==
        JwtError::kUnknownIssuer);
  // An HMAC provider verifies no public-key algorithm, and the other way round.
  CHECK(verify_jwt(hs256(R"({"alg":"RS256"})", payload), auth, kNow).error == JwtError::kAlgorithm);
  auth.jwt[0].algorithms = {static_cast<std::uint8_t>(JwsAlgorithm::kHs512)};
  CHECK(verify_jwt(hs256(kHeader, payload), auth, kNow).error == JwtError::kAlgorithm);
  auth = hmac_auth();
  auth.jwt[0].audiences = {"billing"};
  CHECK(verify_jwt(hs256(kHeader, payload), auth, kNow).error == JwtError::kAudience);
  auth.jwt[0].audiences.clear();  // not checked
  CHECK(verify_jwt(hs256(kHeader, payload), auth, kNow).error == JwtError::kNone);
  // Shapes.
  CHECK(verify_jwt("a.b", auth, kNow).error == JwtError::kMalformed);
  CHECK(verify_jwt("a.b.c.d", auth, kNow).error == JwtError::kMalformed);
  CHECK(verify_jwt(b64url("[1]") + "." + b64url(payload) + ".x", auth, kNow).error ==
        JwtError::kMalformed);
  const std::string deep = R"({"a":)" + std::string(40, '[') + std::string(40, ']') + "}";
  CHECK(verify_jwt(hs256(kHeader, deep), auth, kNow).error == JwtError::kMalformed);
  // A control character in a claim keeps it out (it could go upstream in a header).
  const auto v = verify_jwt(hs256(kHeader, payload_with(R"(,"tier":"pro\r\nX-Evil: 1")")), auth, kNow);
  CHECK(v.error == JwtError::kNone);
  CHECK(std::none_of(v.claims.begin(), v.claims.end(), [](const auto& c) { return c.first == "tier"; }));
}

}  // namespace sluice
