// admin: the listener of the admin endpoints, and the token that protects
// the endpoints reading or changing rate-limit state.
#include <algorithm>

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
      const auto invisible = [](unsigned char ch) { return ch <= 0x20 || ch >= 0x7f; };
      if (file->secret.empty()) {
        r.error(*v, shown(file->path) + " is empty; an admin token must not be empty");
      } else if (std::any_of(file->secret.begin(), file->secret.end(), invisible)) {
        // A client cannot send such a token in a Bearer credential: every call would be 401.
        r.error(*v, shown(file->path) +
                        " holds a space, a control or a non-ASCII character; an admin token is "
                        "one line of visible ASCII");
      } else {
        c.admin.token_file = std::move(file->path);
        c.admin.token = std::move(file->secret);
      }
    }
  }
}

}  // namespace sluice::config
