// redis: where the rate-limit state lives (one server, a Sentinel-watched
// primary or a Cluster), its timeouts, key prefix, key secret, circuit
// breaker and TLS files.
#include <string>

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
    r.error(v, "invalid url: " + *message + ", got " + shown(redact_redis_url(*url)));
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

void read_topology(YamlReader& r, const Field& f, RedisConfig& out) {
  const auto s = r.string(f);
  if (!s) return;
  constexpr RedisConfig::Topology kAll[] = {RedisConfig::Topology::kStandalone,
                                            RedisConfig::Topology::kSentinel,
                                            RedisConfig::Topology::kCluster};
  for (const auto topology : kAll) {
    if (*s == to_string(topology)) {
      out.topology = topology;
      return;
    }
  }
  r.error(f, "expected standalone, sentinel or cluster" + YamlReader::got(f, *s));
}

// The shortest secret accepted: a shorter one could be guessed.
constexpr std::size_t kMinSecretBytes = 16;

// Reads the key secret, and refuses one short enough to be guessed.
void read_key_secret(YamlReader& r, const Field& f, RedisConfig& out) {
  auto file = read_secret_file(r, f);
  if (!file) return;
  if (file->secret.size() < kMinSecretBytes) {
    r.error(f, shown(file->path) + " holds " + std::to_string(file->secret.size()) +
                   " bytes; a key secret needs at least " + std::to_string(kMinSecretBytes));
    return;
  }
  out.key_secret_file = std::move(file->path);
  out.key_secret = std::move(file->secret);
}

// topology, nodes and the sentinel keys, and how they fit together.
void read_layout(YamlReader& r, const Mapping& m, bool url_ok, RedisConfig& redis) {
  if (auto* v = m.get("topology")) read_topology(r, *v, redis);
  if (auto* v = m.get("nodes")) {
    if (auto items = r.list(*v)) {
      for (const auto& item : *items) {
        if (auto a = read_address(r, item, false)) redis.nodes.push_back(*a);
      }
    }
    if (redis.topology == RedisConfig::Topology::kStandalone) {
      r.error(*v, "only valid with topology sentinel or cluster");
    }
  }
  const bool sentinel = redis.topology == RedisConfig::Topology::kSentinel;
  const std::pair<std::string_view, std::string*> sentinel_keys[] = {
      {"sentinel_master", &redis.sentinel_master},
      {"sentinel_username", &redis.sentinel_username},
      {"sentinel_password", &redis.sentinel_password}};
  for (const auto& [key, target] : sentinel_keys) {
    const Field* given = m.get(key);
    if (!given) continue;
    Field v = *given;
    v.secret = key == "sentinel_password";
    if (auto s = r.string(v)) *target = *s;
    if (!sentinel) r.error(v, "only valid with topology sentinel");
  }
  // AUTH needs a password; a user alone would silently send none.
  if (sentinel && !redis.sentinel_username.empty() && redis.sentinel_password.empty()) {
    r.error(*m.get("sentinel_username"), "requires redis.sentinel_password");
  }
  if (sentinel && redis.sentinel_master.empty()) {
    if (const Field* v = m.get("topology")) r.error(*v, "sentinel requires redis.sentinel_master");
  }
  if (redis.topology != RedisConfig::Topology::kCluster) return;
  if (url_ok && redis.db != 0) {
    if (const Field* v = m.get("url")) r.error(*v, "a Redis Cluster has only db 0");
  }
  // A brace in the prefix would make it the hash tag: every bucket in one slot.
  if (redis.key_prefix.find('{') != std::string::npos) {
    if (const Field* v = m.get("key_prefix")) {
      r.error(*v, "must not contain '{' with topology cluster: the bucket's hash tag picks its slot");
    }
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
  read_layout(r, *m, url_ok, redis);
  if (auto* v = m->get("key_secret_file")) read_key_secret(r, *v, redis);
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
