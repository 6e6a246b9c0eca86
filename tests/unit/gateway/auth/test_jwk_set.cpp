// JWKS documents read into keys, and base64url as JWS writes it.
#include <catch2/catch.hpp>

#include "gateway/auth/jwk_set.hpp"

namespace sluice {

TEST_CASE("base64url: the alphabet, no padding, one encoding per value", "[jwt]") {
  CHECK(base64url_decode("") == std::string());
  CHECK(base64url_decode("TWFu") == std::string("Man"));
  CHECK(base64url_decode("TWE") == std::string("Ma"));
  CHECK(base64url_decode("TQ") == std::string("M"));
  CHECK(base64url_decode("-_8") == std::string("\xfb\xff"));
  CHECK_FALSE(base64url_decode("TQ=="));   // padding
  CHECK_FALSE(base64url_decode("T"));      // no byte ends there
  CHECK_FALSE(base64url_decode("TR"));     // leftover bits set
  CHECK_FALSE(base64url_decode("a+b/"));   // base64, not base64url
  CHECK_FALSE(base64url_decode("ab.c"));
}

TEST_CASE("algorithm names: the twelve, never none", "[jwt]") {
  CHECK(jws_algorithm_named("RS256") == JwsAlgorithm::kRs256);
  CHECK(jws_algorithm_named("EdDSA") == JwsAlgorithm::kEdDsa);
  CHECK_FALSE(jws_algorithm_named("none"));
  CHECK_FALSE(jws_algorithm_named("rs256"));
  CHECK(is_hmac(JwsAlgorithm::kHs384));
  CHECK_FALSE(is_hmac(JwsAlgorithm::kPs256));
}

TEST_CASE("a JWKS: keys read, unusable ones skipped, broken ones named", "[jwt]") {
  // An Ed25519 key (RFC 8037's example), one for encryption, and an "oct" secret.
  const auto ok = parse_jwk_set(R"({"keys":[
    {"kty":"OKP","crv":"Ed25519","kid":"ed","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
    {"kty":"OKP","crv":"Ed25519","kid":"enc","use":"enc","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
    {"kty":"oct","kid":"secret","k":"c2VjcmV0"}]})");
  REQUIRE(ok.set);
  CHECK(ok.set->keys.size() == 1);
  CHECK(ok.skipped == 2);
  CHECK(ok.set->find("ed", JwsAlgorithm::kEdDsa));
  CHECK_FALSE(ok.set->find("ed", JwsAlgorithm::kEs256));
  CHECK_FALSE(ok.set->find("other", JwsAlgorithm::kEdDsa));

  CHECK(parse_jwk_set("[]").error == "not a JSON object");
  CHECK(parse_jwk_set("{}").error == "no \"keys\" list");
  CHECK(parse_jwk_set(R"({"keys":[]})").error.starts_with("no key Sluice can verify with"));
  CHECK(parse_jwk_set(R"({"keys":[{"kty":"RSA","kid":"k","n":"!!","e":"AQAB"}]})").error ==
        "key \"k\": an RSA key without base64url n and e");
  CHECK(parse_jwk_set(R"({"keys":[{"kty":"EC","crv":"P-256","x":")" + std::string(44, 'A') +
                      R"(","y":"AA"}]})")
            .error == "key without kid: an EC key without base64url x and y of its curve's size");
  // A coordinate one byte short (its leading zero dropped) is taken at full width:
  // the zeros give the point (0, 0), which is not on the curve, so the key is
  // read as far as the curve check.
  CHECK(parse_jwk_set(R"({"keys":[{"kty":"EC","crv":"P-256","kid":"short","x":")" +
                      std::string(42, 'A') + R"(","y":")" + std::string(43, 'A') + R"("}]})")
            .error == "key \"short\": an EC key whose point is not on its curve");
  // A point that is not on the curve.
  const std::string zeros(43, 'A');
  CHECK(parse_jwk_set(R"({"keys":[{"kty":"EC","crv":"P-256","kid":"p","x":")" + zeros +
                      R"(","y":")" + zeros + R"("}]})")
            .error == "key \"p\": an EC key whose point is not on its curve");
  // A key whose own alg is HMAC is never a public key.
  CHECK(parse_jwk_set(R"({"keys":[{"kty":"OKP","crv":"Ed25519","alg":"HS256","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]})")
            .error.starts_with("no key"));
}

}  // namespace sluice
