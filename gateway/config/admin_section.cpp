// admin: the listener of the admin endpoints.
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {

void read_admin(YamlReader& r, const Field& f, Config& c, ReadNotes& notes) {
  const auto m = r.mapping(f, kAdminKeys.keys);
  if (!m) return;
  if (auto* v = m->get("listen")) {
    if (auto a = read_address(r, *v, true)) {
      c.admin.listen = *a;
      notes.admin_listen = ReadValue{*v, r.here(), {}};
    }
  }
}

}  // namespace sluice::config
