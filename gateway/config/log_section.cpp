// log: the log level and the access log switch.
#include <algorithm>
#include <iterator>

#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"

namespace sluice::config {

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
  if (auto* v = m->get("trace_sampled")) {
    if (auto b = r.boolean(*v)) c.log.trace_sampled = *b;
  }
}

}  // namespace sluice::config
