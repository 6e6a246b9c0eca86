// upstreams.NAME.health_check: the active health checks of an upstream's servers.
#include <limits>
#include <string>

#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {
namespace {

// The target goes on the request line as written: a path of visible ASCII.
void read_path(YamlReader& r, const Field& f, HealthCheckConfig& check) {
  const auto path = r.string(f);
  if (!path) return;
  if (path->empty() || path->front() != '/') {
    return r.error(f, "must start with \"/\"" + YamlReader::got(f, *path));
  }
  for (const char c : *path) {
    if (c <= ' ' || c >= 0x7f) {
      return r.error(f, "must not contain spaces, control or non-ASCII characters" +
                            YamlReader::got(f, *path));
    }
  }
  check.path = *path;
}

std::optional<unsigned> read_status(YamlReader& r, const Field& f) {
  constexpr auto kAny = std::numeric_limits<std::int64_t>::max();
  const auto v = r.integer(f, -kAny, kAny);
  if (!v) return std::nullopt;
  if (*v < 100 || *v > 599) {
    r.error(f, "must be a status between 100 and 599, got " + std::to_string(*v));
    return std::nullopt;
  }
  return static_cast<unsigned>(*v);
}

// One status or a non-empty list of them.
void read_expected_status(YamlReader& r, const Field& f, HealthCheckConfig& check) {
  if (!f.node.IsSequence()) {
    if (auto status = read_status(r, f)) check.expected_status = {*status};
    return;
  }
  const auto items = r.list(f);
  if (!items) return;
  if (items->empty()) return r.error(f, "must list at least one status");
  check.expected_status.clear();
  for (const auto& item : *items) {
    if (auto status = read_status(r, item)) check.expected_status.push_back(*status);
  }
}

std::optional<unsigned> read_threshold(YamlReader& r, const Field& f) {
  const auto n = r.integer(f, 1, kMaxCount);
  if (!n) return std::nullopt;
  return static_cast<unsigned>(*n);
}

}  // namespace

void read_health_check(YamlReader& r, const Field& f, UpstreamConfig& u) {
  const auto m = r.mapping(f, kHealthCheckKeys.keys);
  if (!m) return;
  HealthCheckConfig check;
  if (auto* v = r.required(*m, "path")) read_path(r, *v, check);
  if (auto* v = m->get("interval_ms")) {
    if (auto d = read_duration(r, *v)) check.interval = *d;
  }
  if (auto* v = m->get("timeout_ms")) {
    if (auto d = read_duration(r, *v)) check.timeout = *d;
  }
  if (auto* v = m->get("healthy_threshold")) {
    if (auto n = read_threshold(r, *v)) check.healthy_threshold = *n;
  }
  if (auto* v = m->get("unhealthy_threshold")) {
    if (auto n = read_threshold(r, *v)) check.unhealthy_threshold = *n;
  }
  if (auto* v = m->get("expected_status")) read_expected_status(r, *v, check);
  // A check must end before the next one starts.
  if (check.timeout >= check.interval) {
    r.error(f, "timeout_ms (" + std::to_string(check.timeout.count()) +
                   ") must be less than interval_ms (" + std::to_string(check.interval.count()) +
                   ")");
  }
  u.health_check = std::move(check);
}

}  // namespace sluice::config
