// redis: where the rate-limit state lives, its timeouts, key prefix, circuit
// breaker and TLS files.
#include "gateway/config/keys.hpp"
#include "gateway/config/redis_url.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {
namespace {

// False when the url is given but invalid.
bool read_url(YamlReader& r, const Field& given, RedisConfig& out) {
  Field v = given;
  v.secret = true;  // may carry a password: shown only redacted
  const auto url = r.string(v);
  if (!url) return false;
  if (auto message = parse_redis_url(*url, out)) {
    r.error(v, "invalid url: " + *message + ", got " + quoted(redact_redis_url(*url)));
    return false;
  }
  out.url = *url;
  return true;
}

void read_circuit_breaker(YamlReader& r, const Field& f, CircuitBreakerConfig& out) {
  const auto m = r.mapping(f, kCircuitBreakerKeys.keys);
  if (!m) return;
  if (auto* v = m->get("failures")) {
    if (auto n = r.integer(*v, 1, kMaxCount)) out.failures = static_cast<unsigned>(*n);
  }
  if (auto* v = m->get("open_ms")) {
    if (auto d = read_duration(r, *v)) out.open = *d;
  }
}

}  // namespace

void read_redis(YamlReader& r, const Field& f, Config& c) {
  const auto m = r.mapping(f, kRedisKeys.keys);
  if (!m) return;
  auto& redis = c.redis;
  bool url_ok = true;
  if (const Field* v = m->get("url")) url_ok = read_url(r, *v, redis);
  if (auto* v = m->get("timeout_ms")) {
    if (auto d = read_duration(r, *v)) redis.timeout = *d;
  }
  if (auto* v = m->get("connect_timeout_ms")) {
    if (auto d = read_duration(r, *v)) redis.connect_timeout = *d;
  }
  if (auto* v = m->get("key_prefix")) {
    if (auto s = r.string(*v)) redis.key_prefix = *s;
  }
  if (auto* v = m->get("circuit_breaker")) read_circuit_breaker(r, *v, redis.circuit_breaker);
  const std::pair<std::string_view, std::string*> tls_keys[] = {
      {"tls_ca_file", &redis.tls_ca_file},
      {"tls_cert_file", &redis.tls_cert_file},
      {"tls_key_file", &redis.tls_key_file},
      {"tls_server_name", &redis.tls_server_name}};
  for (const auto& [key, target] : tls_keys) {
    const Field* v = m->get(key);
    if (!v) continue;
    if (auto s = r.string(*v)) *target = *s;
    if (url_ok && !redis.tls) r.error(*v, "only valid with a rediss:// url");
  }
  // A client certificate needs its key and the other way round.
  const Field* cert = m->get("tls_cert_file");
  const Field* key = m->get("tls_key_file");
  if (cert && !key) r.error(*cert, "requires redis.tls_key_file");
  if (key && !cert) r.error(*key, "requires redis.tls_cert_file");
  if (redis.tls && redis.tls_server_name.empty()) redis.tls_server_name = redis.host;
}

}  // namespace sluice::config
