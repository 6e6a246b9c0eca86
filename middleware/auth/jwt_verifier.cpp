#include "middleware/auth/jwt_verifier.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "gateway/auth/jwk_set.hpp"
#include "gateway/auth/jwks_source.hpp"

namespace sluice {
namespace {

constexpr std::size_t kMaxNesting = 32;
constexpr std::size_t kMaxKidBytes = 256;

using Json = nlohmann::json;

// Whether `text`'s brackets nest deeper than kMaxNesting (strings skipped):
// checked before parsing, so a 10,000-deep document costs one pass.
bool too_deep(std::string_view text) {
  std::size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxNesting) return true;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// One part: base64url, then a JSON object.
std::optional<Json> json_part(std::string_view part) {
  const auto bytes = base64url_decode(part);
  if (!bytes || too_deep(*bytes)) return std::nullopt;
  Json doc = Json::parse(*bytes, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  return doc;
}

// A claim by dotted path; nullptr when absent.
const Json* find_path(const Json& doc, std::string_view path) {
  const Json* at = &doc;
  while (!path.empty()) {
    if (!at->is_object()) return nullptr;
    const auto dot = path.find('.');
    const auto name = path.substr(0, dot);
    const auto it = at->find(name);
    if (it == at->end()) return nullptr;
    at = &*it;
    path = dot == std::string_view::npos ? std::string_view{} : path.substr(dot + 1);
  }
  return at;
}

// A claim as text: strings as they are, whole numbers in decimal, booleans
// as true/false; other values (objects, lists, null) give nothing.
constexpr std::size_t kMaxClaimBytes = 1024;

std::optional<std::string> claim_text(const Json& value) {
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    // It may go upstream in a header: no control characters, a bounded size.
    if (text.size() > kMaxClaimBytes ||
        std::any_of(text.begin(), text.end(), [](char c) {
          const auto byte = static_cast<unsigned char>(c);
          return byte < 0x20 || byte == 0x7f;
        })) {
      return std::nullopt;
    }
    return text;
  }
  if (value.is_number_integer()) return std::to_string(value.get<std::int64_t>());
  if (value.is_number_unsigned()) return std::to_string(value.get<std::uint64_t>());
  if (value.is_number_float()) return value.dump();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  return std::nullopt;
}

// A NumericDate claim: nullopt when absent, the error when it is not a number.
struct Date {
  bool present = false;
  bool valid = true;
  double seconds = 0;
};
Date date_claim(const Json& payload, const char* name) {
  const auto it = payload.find(name);
  if (it == payload.end()) return {};
  if (!it->is_number()) return {true, false, 0};
  return {true, true, it->get<double>()};
}

bool accepts(const JwtProvider& provider, JwsAlgorithm alg) {
  if (provider.algorithms.empty()) return true;
  return std::find(provider.algorithms.begin(), provider.algorithms.end(),
                   static_cast<std::uint8_t>(alg)) != provider.algorithms.end();
}

bool audience_matches(const JwtProvider& provider, const Json& payload) {
  if (provider.audiences.empty()) return true;
  const auto it = payload.find("aud");
  if (it == payload.end()) return false;
  const auto listed = [&](const Json& v) {
    return v.is_string() && std::find(provider.audiences.begin(), provider.audiences.end(),
                                      v.get<std::string>()) != provider.audiences.end();
  };
  if (it->is_array()) return std::any_of(it->begin(), it->end(), listed);
  return listed(*it);
}

}  // namespace

std::string_view jwt_error_reason(JwtError error) {
  switch (error) {
    case JwtError::kNone:
      return "none";
    case JwtError::kMalformed:
      return "malformed";
    case JwtError::kAlgorithm:
      return "algorithm";
    case JwtError::kCritical:
      return "critical_header";
    case JwtError::kUnknownIssuer:
      return "unknown_issuer";
    case JwtError::kUnknownKey:
      return "unknown_key";
    case JwtError::kSignature:
      return "signature";
    case JwtError::kExpired:
      return "expired";
    case JwtError::kNotYetValid:
      return "not_yet_valid";
    case JwtError::kAudience:
      return "audience";
  }
  return "malformed";
}

std::string_view jwt_error_description(JwtError error) {
  switch (error) {
    case JwtError::kNone:
      return "";
    case JwtError::kMalformed:
      return "the token is not a well-formed JWT";
    case JwtError::kAlgorithm:
      return "the token's algorithm is not accepted";
    case JwtError::kCritical:
      return "the token has a critical header extension";
    case JwtError::kUnknownIssuer:
      return "the token's issuer is not trusted";
    case JwtError::kUnknownKey:
      return "the token's signing key is not known";
    case JwtError::kSignature:
      return "the token's signature does not verify";
    case JwtError::kExpired:
      return "the token has expired";
    case JwtError::kNotYetValid:
      return "the token is not valid yet";
    case JwtError::kAudience:
      return "the token is not for this audience";
  }
  return "";
}

JwtVerified verify_jwt_checked(std::string_view token, const AuthConfig& auth, std::int64_t now);

JwtVerified verify_jwt(std::string_view token, const AuthConfig& auth, std::int64_t now) {
  // Every access below checks its JSON type first; a type error that slipped
  // through is a malformed token, never an exception out of the data path.
  try {
    return verify_jwt_checked(token, auth, now);
  } catch (const nlohmann::json::exception&) {
    JwtVerified out;
    out.error = JwtError::kMalformed;
    return out;
  }
}

JwtVerified verify_jwt_checked(std::string_view token, const AuthConfig& auth, std::int64_t now) {
  JwtVerified out;
  const auto fail = [&out](JwtError e) {
    out.error = e;
    out.claims.clear();
    return out;
  };
  const auto first = token.find('.');
  const auto second = first == std::string_view::npos ? first : token.find('.', first + 1);
  if (second == std::string_view::npos || token.find('.', second + 1) != std::string_view::npos) {
    return fail(JwtError::kMalformed);
  }
  const auto header = json_part(token.substr(0, first));
  const auto payload = json_part(token.substr(first + 1, second - first - 1));
  const auto signature = base64url_decode(token.substr(second + 1));
  if (!header || !payload || !signature) return fail(JwtError::kMalformed);

  const auto alg_it = header->find("alg");
  if (alg_it == header->end() || !alg_it->is_string()) return fail(JwtError::kAlgorithm);
  const auto alg = jws_algorithm_named(alg_it->get<std::string>());
  if (!alg) return fail(JwtError::kAlgorithm);  // "none" among them
  if (header->contains("crit")) return fail(JwtError::kCritical);
  std::string kid;
  if (const auto it = header->find("kid"); it != header->end()) {
    if (!it->is_string() || it->get_ref<const std::string&>().size() > kMaxKidBytes) {
      return fail(JwtError::kMalformed);
    }
    kid = it->get<std::string>();
  }

  // The provider the token names; its keys, never another's.
  const auto iss = payload->find("iss");
  if (iss == payload->end() || !iss->is_string()) return fail(JwtError::kUnknownIssuer);
  const auto provider_it = std::find_if(auth.jwt.begin(), auth.jwt.end(), [&](const auto& p) {
    return p.issuer == iss->get_ref<const std::string&>();
  });
  if (provider_it == auth.jwt.end()) return fail(JwtError::kUnknownIssuer);
  const JwtProvider& provider = *provider_it;
  out.provider = static_cast<std::size_t>(provider_it - auth.jwt.begin());
  if (!accepts(provider, *alg)) return fail(JwtError::kAlgorithm);

  // A provider with a secret verifies HMAC only, one with keys never does:
  // a public key is never taken as an HMAC secret.
  const std::string_view signing_input = token.substr(0, second);
  if (is_hmac(*alg)) {
    if (provider.secret.empty()) return fail(JwtError::kAlgorithm);
    if (!jws_verify_hmac(*alg, provider.secret, signing_input, *signature)) {
      return fail(JwtError::kSignature);
    }
  } else {
    // A file's keys, or a URL's as last fetched.
    const std::shared_ptr<const JwkSet> fetched = provider.keys ? nullptr
                                                  : provider.jwks ? provider.jwks->keys()
                                                                  : nullptr;
    const JwkSet* keys = provider.keys ? provider.keys.get() : fetched.get();
    if (!provider.keys && !provider.jwks) return fail(JwtError::kAlgorithm);
    if (!keys) {
      provider.jwks->want_refresh();
      return fail(JwtError::kUnknownKey);
    }
    if (kid.empty()) {
      // No kid: the set's one key that can verify this algorithm; with
      // several, the token must say which (one signature check per token,
      // whatever the set).
      const Jwk* only = nullptr;
      for (const Jwk& key : keys->keys) {
        if (!jwk_can_verify(key, *alg)) continue;
        if (only) return fail(JwtError::kUnknownKey);
        only = &key;
      }
      if (!only) return fail(JwtError::kUnknownKey);
      if (!jws_verify(*alg, *only, signing_input, *signature)) return fail(JwtError::kSignature);
    } else {
      const Jwk* key = keys->find(kid, *alg);
      if (!key) {
        if (provider.jwks) provider.jwks->want_refresh();  // rotated keys: fetched again soon
        return fail(JwtError::kUnknownKey);
      }
      if (!jws_verify(*alg, *key, signing_input, *signature)) return fail(JwtError::kSignature);
    }
  }

  const double skew = static_cast<double>(provider.clock_skew_seconds);
  const double t = static_cast<double>(now);
  const Date exp = date_claim(*payload, "exp");
  const Date nbf = date_claim(*payload, "nbf");
  const Date iat = date_claim(*payload, "iat");
  if (!exp.present || !exp.valid || !nbf.valid || !iat.valid) return fail(JwtError::kMalformed);
  if (t >= exp.seconds + skew) return fail(JwtError::kExpired);
  if (nbf.present && t + skew < nbf.seconds) return fail(JwtError::kNotYetValid);
  if (iat.present && t + skew < iat.seconds) return fail(JwtError::kNotYetValid);
  if (!audience_matches(provider, *payload)) return fail(JwtError::kAudience);
  out.expires_at = static_cast<std::int64_t>(std::min(exp.seconds, 9.0e15));

  for (const auto& path : auth.claim_paths) {
    if (const Json* value = find_path(*payload, path)) {
      if (auto text = claim_text(*value)) out.claims.emplace_back(path, std::move(*text));
    }
  }
  return out;
}

}  // namespace sluice
