// Who made a change through the admin API, as the log names them.
#pragma once

#include <string>

#include "gateway/admin/admin_routes.hpp"

namespace sluice {

// The peer's address and a fingerprint of its bearer token (never the
// token): "peer 127.0.0.1, token 3f9a0c1b2d4e", or "peer 127.0.0.1, no token".
// The fingerprint is the first 48 bits of the token's SHA-256 (what
// `printf %s "$TOKEN" | sha256sum | cut -c1-12` prints), enough to tell the
// tokens of a fleet apart and no help in guessing one.
std::string admin_caller(const AdminCall& call);

}  // namespace sluice
