// log: the log level, the access log switch and how long its lines may wait.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>

#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"

namespace sluice::config {
namespace {

// An access log held back longer than a minute is no longer a log to follow.
constexpr std::int64_t kMaxAccessLogFlushMs = 60000;

}  // namespace

void read_log(YamlReader& r, const Field& f, Config& c) {
  const auto m = r.mapping(f, kLogKeys.keys);
  if (!m) return;
  if (auto* v = m->get("level")) {
    if (auto level = r.string(*v)) {
      constexpr std::string_view kLevels[] = {"trace", "debug", "info", "warn", "error"};
      if (std::find(std::begin(kLevels), std::end(kLevels), *level) == std::end(kLevels)) {
        r.error(*v, "unknown log level " + shown(*level) +
                        " (expected trace, debug, info, warn or error)");
      } else {
        c.log.level = *level;
      }
    }
  }
  if (auto* v = m->get("access_log")) {
    if (auto b = r.boolean(*v)) c.log.access_log = *b;
  }
  if (auto* v = m->get("access_log_flush_ms")) {
    if (auto n = r.integer(*v, 0, kMaxAccessLogFlushMs)) {
      c.log.access_log_flush = std::chrono::milliseconds(*n);
    }
  }
  if (auto* v = m->get("trace_sampled")) {
    if (auto b = r.boolean(*v)) c.log.trace_sampled = *b;
  }
}

}  // namespace sluice::config
