// plans: the plans declared once. When the list is given, every plan named
// anywhere (api_keys, limits, exemptions, the consumer store) must be one of
// them; the second pass checks the names.
#include <set>

#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {

void read_plans(YamlReader& r, const Field& f, Config& c, ReadNotes& notes) {
  const auto items = r.list(f);
  if (!items) return;
  if (items->empty()) {
    r.error(f, "must list at least one plan");
    return;
  }
  std::set<std::string> seen;
  bool valid = true;
  for (const auto& item : *items) {
    const auto name = r.nonempty_string(item);
    if (!name || !check_name(r, item, *name)) {
      valid = false;
      continue;
    }
    if (!seen.insert(*name).second) {
      r.error(item, "plan " + shown(*name) + " is listed twice");
      valid = false;
      continue;
    }
    c.plans.push_back(*name);
  }
  if (valid) notes.plans = f;
}

}  // namespace sluice::config
