// local: what an instance decides without Redis (the denial cache, and the
// fleet size behind on_redis_failure: local).
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"

namespace sluice::config {

void read_local(YamlReader& r, const Field& f, Config& c) {
  const auto m = r.mapping(f, kLocalKeys.keys);
  if (!m) return;
  if (auto* v = m->get("deny_cache")) {
    if (auto b = r.boolean(*v)) c.local.deny_cache = *b;
  }
  constexpr std::int64_t kMaxFleet = 100000;
  if (auto* v = m->get("fleet_size")) {
    if (auto n = r.integer(*v, 0, kMaxFleet)) c.local.fleet_size = static_cast<unsigned>(*n);
  }
  if (auto* v = m->get("max_fleet_size")) {
    if (auto n = r.integer(*v, 1, kMaxFleet)) c.local.max_fleet_size = static_cast<unsigned>(*n);
  }
  if (auto* v = m->get("max_buckets")) {
    constexpr std::int64_t kMaxBuckets = 100'000'000;
    if (auto n = r.integer(*v, 1, kMaxBuckets)) c.local.max_buckets = static_cast<std::size_t>(*n);
  }
}

}  // namespace sluice::config
