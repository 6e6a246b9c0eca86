#include "gateway/config/load.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gateway/config/keys.hpp"
#include "gateway/config/resolve.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/yaml_reader.hpp"

namespace sluice {
namespace {

using config::Field;
using config::ReadNotes;
using config::YamlReader;

// The first pass reads the sections in dependency order (errors are sorted by
// line later); the second resolves names and checks across sections.
void read_config(YamlReader& r, const Field& root, Config& c) {
  const auto m = r.mapping(root, config::kRootKeys.keys);
  if (!m) return;
  ReadNotes notes;
  if (auto* s = m->get("server")) read_server(r, *s, c, notes);
  if (auto* s = m->get("admin")) read_admin(r, *s, c, notes);
  if (auto* s = m->get("log")) read_log(r, *s, c);
  if (auto* s = m->get("audit")) read_audit(r, *s, c, notes);
  if (auto* s = m->get("tracing")) read_tracing(r, *s, c);
  if (auto* s = m->get("redis")) read_redis(r, *s, c);
  if (auto* s = m->get("local")) read_local(r, *s, c);
  if (auto* s = r.required(*m, "upstreams")) read_upstreams(r, *s, c, notes);
  if (auto* s = m->get("limits")) {
    read_limits(r, *s, c, notes);
  } else {
    notes.limits_read = true;  // no limits at all: every reference is unknown
  }
  if (auto* s = m->get("plans")) read_plans(r, *s, c, notes);
  if (auto* s = m->get("rls")) read_rls(r, *s, c);
  if (auto* s = m->get("api_keys")) read_api_keys(r, *s, c, notes);
  notes.plans_mark = r.here();
  if (auto* s = m->get("exemptions")) read_exemptions(r, *s, c, notes);
  if (auto* s = m->get("ip_access")) read_ip_access(r, *s, c.ip_access);
  if (auto* s = m->get("auth")) read_auth(r, *s, c);
  if (auto* s = r.required(*m, "routes")) read_routes(r, *s, c, notes);
  config::collect_claim_paths(c);
  config::resolve(r, notes, c);
}

}  // namespace

ConfigResult parse_config(std::string_view yaml_text, std::string_view source) {
  return parse_config(yaml_text, source, process_environment());
}

ConfigResult parse_config(std::string_view yaml_text, std::string_view source,
                          const EnvLookup& env) {
  YamlReader reader(source, env);
  auto config = std::make_shared<Config>();
  config->source = std::string(source);
  reader.read_document(yaml_text, [&](const Field& root) { read_config(reader, root, *config); });
  if (reader.has_errors()) return {nullptr, reader.take_errors(), {}};
  return {std::move(config), {}, reader.take_warnings()};
}

ConfigResult load_config_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) return {nullptr, {path + ": cannot read file: " + std::strerror(errno)}, {}};
  std::string text;
  char buf[8192];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, file)) > 0) text.append(buf, n);
  const bool failed = std::ferror(file) != 0;
  const int err = errno;
  std::fclose(file);
  if (failed) return {nullptr, {path + ": cannot read file: " + std::strerror(err)}, {}};
  return parse_config(text, path);
}

}  // namespace sluice
