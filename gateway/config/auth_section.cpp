// auth: the JSON Web Token providers whose tokens routes verify (auth.jwt),
// where a token is looked for, and a route's auth. The keys of a provider's
// JWKS file are read here, so --check refuses a file Sluice cannot use.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "common/ascii.hpp"
#include "gateway/auth/jwk_set.hpp"
#include "gateway/auth/jwks_source.hpp"
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"
#include "upstream/header_rules.hpp"
#include "upstream/upstream_tls.hpp"

namespace sluice::config {
namespace {

constexpr std::size_t kMaxJwksBytes = 1u << 20;
constexpr std::size_t kMinHmacSecret = 32;  // bytes: as long as SHA-256's output (RFC 7518 3.2)
constexpr std::int64_t kMaxTokenBytes = 65536;
constexpr std::int64_t kMaxClockSkew = 600;
constexpr std::size_t kMaxClaimDepth = 8;

void add_once(std::vector<std::string>& list, const std::string& value) {
  if (!value.empty() && std::find(list.begin(), list.end(), value) == list.end()) {
    list.push_back(value);
  }
}

std::optional<TokenSource> read_token_source(YamlReader& r, const Field& f) {
  const auto s = r.string(f);
  if (!s) return std::nullopt;
  const std::string_view t = *s;
  const auto colon = t.find(':');
  const auto kind = t.substr(0, colon);
  const auto name = colon == std::string_view::npos ? std::string_view{} : t.substr(colon + 1);
  if (kind == "header" && is_token(name)) {
    // Authorization carries the token after its Bearer scheme; any other header is the token.
    return TokenSource{ascii::iequals(name, "Authorization") ? TokenSource::Kind::kBearer
                                                              : TokenSource::Kind::kHeader,
                       std::string(name)};
  }
  if (kind == "cookie" && is_token(name)) return TokenSource{TokenSource::Kind::kCookie, std::string(name)};
  if (kind == "query" && !name.empty()) return TokenSource{TokenSource::Kind::kQuery, std::string(name)};
  r.error(f, "expected header:NAME, cookie:NAME or query:NAME, got " + shown(t));
  return std::nullopt;
}

std::optional<std::string> read_claim_path(YamlReader& r, const Field& f) {
  auto s = r.string(f);
  if (!s) return std::nullopt;
  if (auto why = claim_path_problem(*s); !why.empty()) {
    r.error(f, why);
    return std::nullopt;
  }
  return s;
}

void read_jwks_file(YamlReader& r, const Field& f, JwtProvider& p) {
  const auto path = r.nonempty_string(f);
  if (!path) return;
  std::ifstream file(*path, std::ios::binary);
  if (!file) return r.error(f, "cannot read " + shown(*path) + ": " + std::strerror(errno));
  std::string text(kMaxJwksBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(file.gcount()));
  if (text.size() > kMaxJwksBytes) return r.error(f, shown(*path) + " is larger than 1 MiB");
  auto keys = parse_jwk_set(text);
  if (!keys.set) return r.error(f, shown(*path) + ": " + keys.error);
  p.jwks_file = *path;
  p.keys = std::move(keys.set);
}

// The URL and its fetch settings; the keys come later, from the fetcher.
void read_jwks_url(YamlReader& r, const Mapping& m, const Field& f, JwtProvider& p) {
  const auto text = r.nonempty_string(f);
  if (!text) return;
  std::string error;
  auto url = parse_jwks_url(*text, error);
  if (!url) return r.error(f, error + ": " + shown(*text));
  JwksSettings settings;
  settings.url = std::move(*url);
  if (auto* v = m.get("jwks_ca_file")) {
    if (auto s = r.nonempty_string(*v)) settings.ca_file = *s;
  }
  if (settings.url.tls) {
    // Built now: a CA file that does not load is refused here, not at the first fetch.
    UpstreamTlsConfig tls;
    tls.ca_file = settings.ca_file;
    std::string why;
    settings.tls = UpstreamTls::build(tls, why);
    if (!settings.tls) return r.error(m.get("jwks_ca_file") ? *m.get("jwks_ca_file") : f, why);
  }
  if (auto* v = m.get("jwks_refresh_ms")) {
    if (auto d = read_duration(r, *v)) settings.refresh = *d;
  }
  if (auto* v = m.get("jwks_min_refresh_ms")) {
    if (auto d = read_duration(r, *v)) settings.min_refresh = *d;
  }
  if (auto* v = m.get("jwks_timeout_ms")) {
    if (auto d = read_duration(r, *v)) settings.timeout = *d;
  }
  p.jwks = jwks_source(settings);
}

void read_algorithms(YamlReader& r, const Field& f, JwtProvider& p) {
  const auto items = r.list(f);
  if (!items) return;
  if (items->empty()) r.error(f, "must list at least one algorithm (omit the key for any)");
  for (const auto& item : *items) {
    const auto s = r.string(item);
    if (!s) continue;
    const auto alg = jws_algorithm_named(*s);
    if (!alg) {
      r.error(item, "unknown algorithm " + shown(*s) +
                        (ascii::iequals(*s, "none") ? " (an unsigned token is never accepted)"
                                                     : " (expected RS256, RS384, RS512, PS256, "
                                                       "PS384, PS512, ES256, ES384, EdDSA, HS256, "
                                                       "HS384 or HS512)"));
      continue;
    }
    p.algorithms.push_back(static_cast<std::uint8_t>(*alg));
  }
}

void read_forward_claims(YamlReader& r, const Field& f, JwtProvider& p,
                         const std::vector<TokenSource>& token_from) {
  const auto m = r.named_mapping(f);
  if (!m) return;
  for (const auto& e : m->entries) {
    auto path = e.key;
    if (auto why = claim_path_problem(path); !why.empty()) {
      r.error(e.value, why);
      continue;
    }
    const auto header = r.string(e.value);
    if (!header) continue;
    if (!is_token(*header)) {
      r.error(e.value, "invalid header name " + shown(*header));
      continue;
    }
    if (is_protected_request_header(*header)) {
      r.error(e.value, shown(*header) + " is a header Sluice sets or frames itself");
      continue;
    }
    // Headers with another meaning upstream, or where the token itself came from.
    bool taken = false;
    for (const char* other : {"X-Consumer-Id", "X-Consumer-Plan", "Authorization", "Cookie",
                              "X-Forwarded-Client-Cert", "X-Client-Cert-Subject",
                              "X-Client-Cert-San-Uri", "X-Client-Cert-San-Dns",
                              "X-Client-Cert-Fingerprint"}) {
      taken = taken || ascii::iequals(*header, other);
    }
    for (const auto& source : token_from) {
      taken = taken || ((source.kind == TokenSource::Kind::kHeader ||
                         source.kind == TokenSource::Kind::kBearer) &&
                        ascii::iequals(*header, source.name));
    }
    if (taken) {
      r.error(e.value, shown(*header) + " already means something upstream (a consumer header, "
                                        "a credential or the token's own header)");
      continue;
    }
    p.forward_claims.emplace_back(path, *header);
  }
}

void read_provider(YamlReader& r, const Field& f, JwtProvider& p, std::set<std::string>& issuers,
                   const std::vector<TokenSource>& token_from) {
  const auto m = r.mapping(f, kJwtProviderKeys.keys);
  if (!m) return;
  if (auto* v = r.required(*m, "name")) {
    if (auto s = r.string(*v); s && check_name(r, *v, *s)) p.name = *s;
  }
  if (auto* v = r.required(*m, "issuer")) {
    if (auto s = r.nonempty_string(*v)) {
      if (!issuers.insert(*s).second) r.error(*v, "issuer " + shown(*s) + " is named twice");
      p.issuer = *s;
    }
  }
  if (auto* v = m->get("audiences")) {
    if (auto items = r.list(*v)) {
      for (const auto& item : *items) {
        if (auto s = r.nonempty_string(item)) p.audiences.push_back(*s);
      }
    }
  }
  const Field* jwks_file = m->get("jwks_file");
  const Field* jwks_url = m->get("jwks_url");
  const Field* jwks = jwks_file ? jwks_file : jwks_url;
  const Field* secret = m->get("secret_file");
  if (jwks_file && jwks_url) {
    r.error(*jwks_url, "one of jwks_file or jwks_url");
  } else if (jwks && secret) {
    r.error(*secret, "a provider with a JWKS takes no secret_file: an HMAC secret beside public "
                     "keys invites algorithm confusion");
  } else if (jwks_file) {
    read_jwks_file(r, *jwks_file, p);
  } else if (jwks_url) {
    read_jwks_url(r, *m, *jwks_url, p);
  }
  if (!jwks_url) {
    for (const char* key : {"jwks_ca_file", "jwks_refresh_ms", "jwks_min_refresh_ms", "jwks_timeout_ms"}) {
      if (auto* v = m->get(key)) r.error(*v, "only with jwks_url");
    }
  }
  if (jwks) {
  } else if (secret) {
    if (auto file = read_secret_file(r, *secret)) {
      if (file->secret.size() < kMinHmacSecret) {
        r.error(*secret, shown(file->path) + " holds " + std::to_string(file->secret.size()) +
                             " bytes; an HMAC secret must be at least 32");
      } else {
        p.secret_file = std::move(file->path);
        p.secret = std::move(file->secret);
      }
    }
  } else {
    r.error(f, "needs jwks_file or jwks_url (public keys), or secret_file (HS256/384/512)");
  }
  if (auto* v = m->get("algorithms")) {
    read_algorithms(r, *v, p);
    for (const auto alg : p.algorithms) {
      const bool hmac = is_hmac(static_cast<JwsAlgorithm>(alg));
      const auto name = std::string(jws_algorithm_name(static_cast<JwsAlgorithm>(alg)));
      if (hmac && jwks) r.error(*v, name + " needs secret_file; this provider has a JWKS");
      if (!hmac && secret && !jwks) r.error(*v, name + " needs jwks_file; this provider has a secret");
    }
  }
  if (auto* v = m->get("clock_skew_seconds")) {
    if (auto n = r.integer(*v, 0, kMaxClockSkew)) p.clock_skew_seconds = *n;
  }
  if (auto* v = m->get("consumer_claim")) {
    if (auto s = read_claim_path(r, *v)) p.consumer_claim = *s;
  }
  if (auto* v = m->get("plan_claim")) {
    if (auto s = read_claim_path(r, *v)) p.plan_claim = *s;
  }
  if (auto* v = m->get("org_claim")) {
    if (auto s = read_claim_path(r, *v)) p.org_claim = *s;
  }
  if (auto* v = m->get("forward_claims")) read_forward_claims(r, *v, p, token_from);
}

}  // namespace

std::string claim_path_problem(std::string_view path) {
  if (path.empty()) return "missing claim name";
  std::size_t depth = 1;
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '.') {
      if (i == 0 || i + 1 == path.size() || path[i - 1] == '.') {
        return "invalid claim path " + shown(path) + " (names joined by single dots)";
      }
      ++depth;
    } else if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      return "invalid claim path " + shown(path) + " (visible ASCII only)";
    }
  }
  if (depth > kMaxClaimDepth) return "claim path " + shown(path) + " is more than 8 names deep";
  return {};
}

void read_auth(YamlReader& r, const Field& f, Config& c) {
  const auto m = r.mapping(f, kAuthKeys.keys);
  if (!m) return;
  const Field* jwt = m->get("jwt");
  if (!jwt) return;
  const auto j = r.mapping(*jwt, kJwtKeys.keys);
  if (!j) return;
  AuthConfig& auth = c.auth;
  if (auto* v = j->get("from")) {
    if (auto items = r.list(*v)) {
      if (items->empty()) r.error(*v, "must list at least one place (omit the key for Authorization: Bearer)");
      for (const auto& item : *items) {
        if (auto source = read_token_source(r, item)) auth.token_from.push_back(*source);
      }
    }
  } else {
    auth.token_from.push_back({TokenSource::Kind::kBearer, "Authorization"});
  }
  if (auto* v = j->get("max_token_bytes")) {
    if (auto n = r.integer(*v, 256, kMaxTokenBytes)) auth.max_token_bytes = static_cast<std::size_t>(*n);
  }
  if (auto* v = j->get("cache_max_entries")) {
    if (auto n = r.integer(*v, 0, kMaxCount)) auth.cache_max_entries = static_cast<std::size_t>(*n);
  }
  if (auto* v = r.required(*j, "providers")) {
    if (auto items = r.list(*v)) {
      if (items->empty()) r.error(*v, "must list at least one provider");
      std::set<std::string> issuers;
      for (const auto& item : *items) {
        JwtProvider provider;
        read_provider(r, item, provider, issuers, auth.token_from);
        auth.jwt.push_back(std::move(provider));
      }
    }
  }
}

std::optional<RouteAuth> read_route_auth(YamlReader& r, const Field& f) {
  const auto s = r.string(f);
  if (!s) return std::nullopt;
  if (*s == "none") return RouteAuth::kNone;
  if (*s == "optional") return RouteAuth::kOptional;
  if (*s == "required") return RouteAuth::kRequired;
  r.error(f, "expected required, optional or none, got " + shown(*s));
  return std::nullopt;
}

void collect_claim_paths(Config& c) {
  AuthConfig& auth = c.auth;
  for (const auto& p : auth.jwt) {
    add_once(auth.claim_paths, p.consumer_claim);
    add_once(auth.claim_paths, p.plan_claim);
    add_once(auth.claim_paths, p.org_claim);
    for (const auto& [path, header] : p.forward_claims) {
      add_once(auth.claim_paths, path);
      add_once(auth.forwarded_headers, header);
    }
  }
  for (const auto& limit : c.limits) {
    for (const auto& source : limit.key) {
      if (source.kind == KeySource::Kind::kJwt) add_once(auth.claim_paths, source.name);
    }
  }
  // What only Sluice may send upstream, per route: the certificate's headers
  // and the forwarded claims, on every route.
  // With client certificates on (or forwarded), a client's own lines of the
  // certificate headers never go upstream, forwarded or not.
  std::vector<std::string> cert_headers;
  if (c.server.tls && (c.server.tls->client_auth != TlsConfig::ClientAuth::kNone ||
                       c.server.tls->forward_client_cert != TlsConfig::ForwardCert::kNone)) {
    cert_headers = {"X-Forwarded-Client-Cert", "X-Client-Cert-Subject", "X-Client-Cert-San-Uri",
                    "X-Client-Cert-San-Dns", "X-Client-Cert-Fingerprint"};
  }
  for (auto& route : c.routes) {
    route.identity_headers = cert_headers;
    for (const auto& header : auth.forwarded_headers) add_once(route.identity_headers, header);
  }
}

}  // namespace sluice::config
