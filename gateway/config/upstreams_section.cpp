// upstreams: the named pools of servers that routes send requests to.
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {
namespace {

// upstreams.NAME.tls: the files are loaded and the context built here, so
// that --check, a start and a reload refuse the same bad files.
void read_upstream_tls(YamlReader& r, const Field& f, UpstreamConfig& u) {
  const auto m = r.mapping(f, kUpstreamTlsKeys.keys);
  if (!m) return;
  UpstreamTlsConfig tls;
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
  if (cert && !key) r.error(*cert, "requires upstreams." + u.name + ".tls.key_file");
  if (key && !cert) r.error(*key, "requires upstreams." + u.name + ".tls.certificate_file");
  valid = valid && (cert != nullptr) == (key != nullptr);
  if (auto* v = m->get("min_version")) {
    const auto version = read_tls_version(r, *v);
    if (version) tls.min_version = *version;
    valid = valid && version.has_value();
  }
  if (!valid) return;
  std::string error;
  u.tls = UpstreamTls::build(tls, error);
  if (!u.tls) return r.error(f, error);
  u.tls_config = std::move(tls);
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

void read_upstream(YamlReader& r, const Field& f, UpstreamConfig& u) {
  const auto m = r.mapping(f, kUpstreamKeys.keys);
  if (!m) return;
  if (auto* v = r.required(*m, "servers")) {
    if (auto items = r.list(*v)) {
      if (items->empty()) r.error(*v, "must list at least one server");
      for (const auto& item : *items) {
        if (auto a = read_address(r, item, false)) u.servers.push_back(*a);
      }
    }
  }
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
  if (auto* v = m->get("tls")) read_upstream_tls(r, *v, u);
  if (auto* v = m->get("protocol")) read_protocol(r, *v, *m, u);
}

}  // namespace

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
