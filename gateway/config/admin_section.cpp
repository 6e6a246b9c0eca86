// admin: the listener of the admin endpoints, and the token that protects
// the endpoints reading or changing rate-limit state.
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
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
  if (auto* v = m->get("token_file")) {
    if (auto file = read_secret_file(r, *v)) {
      if (file->secret.empty()) {
        r.error(*v, quoted(file->path) + " is empty; an admin token must not be empty");
      } else {
        c.admin.token_file = std::move(file->path);
        c.admin.token = std::move(file->secret);
      }
    }
  }
}

}  // namespace sluice::config
