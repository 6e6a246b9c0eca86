// A JSON Web Token (RFC 7519) checked against the configured providers:
// three base64url parts, a header whose alg a provider accepts (never "none",
// no "crit"), the provider its "iss" names, a key of its JWKS (by kid) or its
// HMAC secret, the signature, then exp (required), nbf and iat within the
// provider's clock skew and aud among its audiences. What the configuration
// reads of the claims is kept. Pure: no I/O, the time is given.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/config/config.hpp"

namespace sluice {

enum class JwtError : std::uint8_t {
  kNone,
  kMalformed,      // not three base64url parts of JSON objects, or nested too deep
  kAlgorithm,      // alg missing, "none", or not one the provider accepts
  kCritical,       // a "crit" header: an extension Sluice does not understand
  kUnknownIssuer,  // no provider has this "iss"
  kUnknownKey,     // no key of the provider's JWKS has this kid for this alg
  kSignature,      // the signature does not verify
  kExpired,
  kNotYetValid,  // nbf, or iat, in the future
  kAudience,
};

// The label of sluice_auth_denied_total{reason} and the words of
// WWW-Authenticate's error_description.
std::string_view jwt_error_reason(JwtError error);
std::string_view jwt_error_description(JwtError error);

struct JwtVerified {
  JwtError error = JwtError::kNone;
  std::size_t provider = 0;     // index into auth.jwt
  std::int64_t expires_at = 0;  // exp, seconds since the epoch
  // The values of auth.claim_paths the token has (strings, numbers, booleans).
  std::vector<std::pair<std::string, std::string>> claims;
};

JwtVerified verify_jwt(std::string_view token, const AuthConfig& auth, std::int64_t now_seconds);

}  // namespace sluice
