// exemptions: the clients whose requests skip rate limiting, by client
// address (after trusted proxies) or by the plan of their API key. Plan names
// are checked against api_keys by the second pass.
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {

void read_exemptions(YamlReader& r, const Field& f, Config& c, ReadNotes& notes) {
  const auto m = r.mapping(f, kExemptionsKeys.keys);
  if (!m) return;
  auto& e = c.exemptions;
  if (auto* v = m->get("client_cidrs")) {
    if (auto items = r.list(*v)) {
      for (const auto& item : *items) {
        if (auto cidr = read_cidr(r, item)) e.client_cidrs.push_back(*cidr);
      }
    }
  }
  if (auto* v = m->get("plans")) {
    if (auto items = r.list(*v)) {
      for (const auto& item : *items) {
        if (auto plan = r.nonempty_string(item)) {
          e.plans.push_back(*plan);
          notes.exempt_plans.push_back(ReadValue{item, r.here(), *plan});
        }
      }
    }
  }
}

}  // namespace sluice::config
