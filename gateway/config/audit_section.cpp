// audit: the denial stream (a Redis Stream every denial is appended to).
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"

namespace sluice::config {

void read_audit(YamlReader& r, const Field& f, Config& c, ReadNotes& notes) {
  const auto m = r.mapping(f, kAuditKeys.keys);
  if (!m) return;
  if (auto* v = m->get("redis_stream")) {
    if (auto name = r.string(*v)) {
      constexpr std::size_t kMaxName = 256;
      if (name->empty() || name->size() > kMaxName) {
        r.error(*v, "must be a Redis key name of 1 to 256 bytes");
      } else if (name->find_first_of(" \t\r\n") != std::string::npos) {
        r.error(*v, "must not contain whitespace, got " + shown(*name));
      } else {
        c.audit.redis_stream = *name;
        notes.audit_stream = *v;
      }
    }
  }
  if (auto* v = m->get("max_len")) {
    constexpr std::int64_t kMaxLen = 100'000'000;
    if (auto n = r.integer(*v, 1, kMaxLen)) c.audit.max_len = static_cast<std::size_t>(*n);
  }
}

}  // namespace sluice::config
