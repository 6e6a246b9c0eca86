// upstreams: the named pools of servers that routes send requests to.
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/values.hpp"
#include "upstream/balance/maglev.hpp"

namespace sluice::config {
namespace {

constexpr std::int64_t kMaxServerWeight = 1000;
// A consistent table holds server indexes in 16 bits, and a far larger
// upstream is a directory service's job.
constexpr std::size_t kMaxHashServers = 1000;

// upstreams.NAME.tls: the files are loaded and the context built here, so
// that --check, a start and a reload refuse the same bad files.
void read_upstream_tls(YamlReader& r, const Field& f, UpstreamConfig& u) {
  UpstreamTlsConfig tls;
  if (auto built = read_client_tls(r, f, kUpstreamTlsKeys, "upstreams." + u.name + ".tls", tls)) {
    u.tls = std::move(built);
    u.tls_config = std::move(tls);
  }
}

// upstreams.NAME.protocol: http1 (the default), h2c, or h2 (TLS: the tls
// section's settings, or the system's CAs and each server's name).
void read_protocol(YamlReader& r, const Field& v, const Mapping& m, UpstreamConfig& u) {
  const auto s = r.string(v);
  if (!s) return;
  if (*s == "http1") {
    u.protocol = UpstreamProtocol::kHttp1;
  } else if (*s == "h2c") {
    u.protocol = UpstreamProtocol::kH2c;
    if (m.get("tls")) r.error(v, "h2c is HTTP/2 without TLS: with a tls section, use protocol h2");
  } else if (*s == "h2") {
    u.protocol = UpstreamProtocol::kH2;
    if (!m.get("tls")) {
      std::string error;
      u.tls = UpstreamTls::build(UpstreamTlsConfig{}, error);
      if (!u.tls) return r.error(v, error);
      u.tls_config = UpstreamTlsConfig{};
    }
  } else {
    r.error(v, "must be http1, h2c or h2");
  }
}

// A server: "host:port", or {address: "host:port", weight: N}.
void read_server(YamlReader& r, const Field& item, UpstreamConfig& u) {
  if (!item.node.IsMap()) {
    if (auto a = read_address(r, item, false)) {
      u.servers.push_back(*a);
      u.weights.push_back(1);
    }
    return;
  }
  const auto m = r.mapping(item, kUpstreamServerKeys.keys);
  if (!m) return;
  const Field* address = r.required(*m, "address");
  auto a = address ? read_address(r, *address, false) : std::nullopt;
  unsigned weight = 1;
  if (auto* v = m->get("weight")) {
    // A server is taken out by removing it: weight 0 would only hide it.
    if (auto n = r.integer(*v, 1, kMaxServerWeight)) weight = static_cast<unsigned>(*n);
  }
  if (a) {
    u.servers.push_back(*a);
    u.weights.push_back(weight);
  }
}

// upstreams.NAME.balance, and hash_on with it.
void read_balance(YamlReader& r, const Mapping& m, UpstreamConfig& u) {
  const Field* balance = m.get("balance");
  if (balance) {
    const auto s = r.string(*balance);
    if (!s) return;
    if (*s == "round_robin") {
      u.balance = BalancePolicy::kRoundRobin;
    } else if (*s == "least_request") {
      u.balance = BalancePolicy::kLeastRequest;
    } else if (*s == "random") {
      u.balance = BalancePolicy::kRandom;
    } else if (*s == "hash") {
      u.balance = BalancePolicy::kHash;
    } else {
      return r.error(*balance, "must be round_robin, least_request, random or hash");
    }
  }
  const Field* hash_on = m.get("hash_on");
  if (u.balance != BalancePolicy::kHash) {
    if (hash_on) r.error(*hash_on, "is read only with balance: hash");
    return;
  }
  if (!hash_on) return r.error(*balance, "balance hash requires hash_on");
  u.hash_on = read_request_key(r, *hash_on, true);
  if (u.servers.empty() || u.servers.size() > kMaxHashServers) {
    if (u.servers.size() > kMaxHashServers) {
      r.error(*balance, "balance hash takes at most " + std::to_string(kMaxHashServers) +
                            " servers");
    }
    return;
  }
  std::vector<std::string> names;
  for (const auto& server : u.servers) names.push_back(server.to_string());
  u.ring = std::make_shared<const MaglevTable>(names, u.weights);
}

// upstreams.NAME.outlier_detection: {} takes every default.
void read_outlier_detection(YamlReader& r, const Field& f, UpstreamConfig& u) {
  const auto m = r.mapping(f, kOutlierKeys.keys);
  if (!m) return;
  OutlierConfig o;
  bool valid = true;
  const auto count = [&](std::string_view key, unsigned& into) {
    if (const Field* v = m->get(key)) {
      const auto n = r.integer(*v, 0, kMaxCount);
      if (n) into = static_cast<unsigned>(*n);
      valid = valid && n;
    }
  };
  count("consecutive_5xx", o.consecutive_5xx);
  count("consecutive_gateway_errors", o.consecutive_gateway_errors);
  if (const Field* v = m->get("base_ejection_ms")) {
    const auto d = read_duration(r, *v);
    if (d) o.base_ejection = *d;
    valid = valid && d;
  }
  if (const Field* v = m->get("max_ejection_ms")) {
    const auto d = read_duration(r, *v);
    if (d) o.max_ejection = *d;
    valid = valid && d;
  }
  if (const Field* v = m->get("max_ejection_percent")) {
    const auto n = r.integer(*v, 0, 100);
    if (n) o.max_ejection_percent = static_cast<unsigned>(*n);
    valid = valid && n;
  }
  if (valid && o.max_ejection < o.base_ejection) {
    r.error(f, "max_ejection_ms (" + std::to_string(o.max_ejection.count()) +
                   ") must be at least base_ejection_ms (" +
                   std::to_string(o.base_ejection.count()) + ")");
    valid = false;
  }
  if (valid && o.consecutive_5xx == 0 && o.consecutive_gateway_errors == 0) {
    r.error(f, "consecutive_5xx and consecutive_gateway_errors are both 0: nothing would eject "
               "a server (remove outlier_detection instead)");
    valid = false;
  }
  if (valid) u.outlier_detection = o;
}

// upstreams.NAME.retry_budget: {} takes every default.
void read_retry_budget(YamlReader& r, const Field& f, UpstreamConfig& u) {
  const auto m = r.mapping(f, kRetryBudgetKeys.keys);
  if (!m) return;
  RetryBudgetConfig budget;
  bool valid = true;
  if (const Field* v = m->get("percent")) {
    const auto n = r.integer(*v, 0, 100);
    if (n) budget.percent = static_cast<double>(*n);
    valid = valid && n;
  }
  if (const Field* v = m->get("min_concurrent")) {
    const auto n = r.integer(*v, 0, kMaxCount);
    if (n) budget.min_concurrent = static_cast<std::size_t>(*n);
    valid = valid && n;
  }
  if (valid && budget.percent == 0 && budget.min_concurrent == 0) {
    r.error(f, "percent and min_concurrent are both 0: no retry could ever start (remove the "
               "routes' retry instead)");
    valid = false;
  }
  if (valid) u.retry_budget = budget;
}

void read_upstream(YamlReader& r, const Field& f, UpstreamConfig& u) {
  const auto m = r.mapping(f, kUpstreamKeys.keys);
  if (!m) return;
  if (auto* v = r.required(*m, "servers")) {
    if (auto items = r.list(*v)) {
      if (items->empty()) r.error(*v, "must list at least one server");
      for (const auto& item : *items) read_server(r, item, u);
    }
  }
  read_balance(r, *m, u);
  if (auto* v = m->get("connect_timeout_ms")) {
    if (auto d = read_duration(r, *v)) u.connect_timeout = *d;
  }
  if (auto* v = m->get("response_timeout_ms")) {
    if (auto d = read_duration(r, *v)) u.response_timeout = *d;
  }
  if (auto* v = m->get("max_idle_connections")) {
    // 0 is allowed: no keep-alive pool.
    if (auto n = r.integer(*v, 0, kMaxCount)) u.max_idle_connections = *n;
  }
  if (auto* v = m->get("fail_cooldown_ms")) {
    if (auto d = read_duration(r, *v)) u.fail_cooldown = *d;
  }
  if (auto* v = m->get("max_connections")) {
    // 0 is allowed: no bound but the process's upstream descriptors.
    if (auto n = r.integer(*v, 0, kMaxCount)) u.max_connections = *n;
  }
  if (auto* v = m->get("health_check")) read_health_check(r, *v, u);
  if (auto* v = m->get("outlier_detection")) read_outlier_detection(r, *v, u);
  if (auto* v = m->get("retry_budget")) read_retry_budget(r, *v, u);
  if (auto* v = m->get("tls")) read_upstream_tls(r, *v, u);
  if (auto* v = m->get("protocol")) read_protocol(r, *v, *m, u);
}

}  // namespace

std::shared_ptr<const UpstreamTls> read_client_tls(YamlReader& r, const Field& f,
                                                   const MappingKeys& keys, std::string_view path,
                                                   UpstreamTlsConfig& tls) {
  const auto m = r.mapping(f, keys.keys);
  if (!m) return nullptr;
  bool valid = true;
  const std::pair<std::string_view, std::string*> files[] = {
      {"ca_file", &tls.ca_file},
      {"server_name", &tls.server_name},
      {"certificate_file", &tls.certificate_file},
      {"key_file", &tls.key_file}};
  for (const auto& [key, target] : files) {
    const Field* v = m->get(key);
    if (!v) continue;
    if (auto s = r.nonempty_string(*v)) {
      *target = *s;
    } else {
      valid = false;
    }
  }
  // A client certificate needs its key and the other way round.
  const Field* cert = m->get("certificate_file");
  const Field* key = m->get("key_file");
  if (cert && !key) r.error(*cert, "requires " + std::string(path) + ".key_file");
  if (key && !cert) r.error(*key, "requires " + std::string(path) + ".certificate_file");
  valid = valid && (cert != nullptr) == (key != nullptr);
  if (auto* v = m->get("min_version")) {
    const auto version = read_tls_version(r, *v);
    if (version) tls.min_version = *version;
    valid = valid && version.has_value();
  }
  if (!valid) return nullptr;
  std::string error;
  auto built = UpstreamTls::build(tls, error);
  if (!built) r.error(f, error);
  return built;
}


void read_upstreams(YamlReader& r, const Field& f, Config& c, ReadNotes& notes) {
  const auto m = r.named_mapping(f);
  if (!m) return;
  notes.upstreams_read = true;
  for (const auto& [name, value] : m->entries) {
    UpstreamConfig u;
    u.name = name;
    check_name(r, value, name);
    read_upstream(r, value, u);
    c.upstreams.push_back(std::move(u));  // kept even if invalid, so routes resolve
  }
}

}  // namespace sluice::config
