// upstreams: the named pools of servers that routes send requests to.
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {
namespace {

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
    // 0 is allowed: no limit.
    if (auto n = r.integer(*v, 0, kMaxCount)) u.max_connections = *n;
  }
  if (auto* v = m->get("health_check")) read_health_check(r, *v, u);
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
