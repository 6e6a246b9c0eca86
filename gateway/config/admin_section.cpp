// admin: the listener of the admin endpoints, the token that protects the
// endpoints reading or changing rate-limit state, and the host names their
// requests may give.
#include <algorithm>

#include "common/ip_literal.hpp"

#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {
namespace {

// admin.hosts: DNS names as a Host header gives them (no port, no scheme).
// An address needs no entry: loopback addresses and the listener's own are
// taken already, and DNS rebinding always goes through a name.
void read_admin_hosts(YamlReader& r, const Field& f, std::vector<std::string>& hosts) {
  const auto items = r.list(f);
  if (!items) return;
  for (const auto& item : *items) {
    const auto name = r.nonempty_string(item);
    if (!name) continue;
    if (!is_host_name(*name) || is_ip_address(*name) ||
        name->find_first_not_of("0123456789.") == std::string::npos) {
      r.error(item,
              "expected a host name such as admin.example.internal (no port, no scheme, "
              "not an address)" +
                  YamlReader::got(item, *name));
      continue;
    }
    hosts.push_back(*name);
  }
}

}  // namespace

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
  if (auto* v = m->get("hosts")) read_admin_hosts(r, *v, c.admin.hosts);
}

}  // namespace sluice::config
