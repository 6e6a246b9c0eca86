// Who may call the admin endpoints that read or change state beyond the
// process's own health (the bucket API, and any later endpoint registered as
// protected): with an admin token configured, only a request carrying it as
// `Authorization: Bearer <token>`; without one, only a request to an admin
// listener bound to a loopback address. Pure functions, no I/O; the
// Application keeps the AdminAccess in force on the main thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "gateway/admin/admin_routes.hpp"

namespace sluice {

// The token of an "Authorization: Bearer <token>" value (scheme
// case-insensitive, surrounding spaces ignored); nullopt for anything else.
std::optional<std::string_view> bearer_token(std::string_view authorization);

// Whether two strings are equal, in a time that depends on their lengths only.
bool constant_time_equal(std::string_view a, std::string_view b);

// The refusal of `request` under `access`: 401 (with WWW-Authenticate: Bearer)
// when a token is configured and the request does not carry it, 403 when none
// is configured and the listener is not on loopback; nullopt when it may go on.
std::optional<AdminResponse> refuse_admin_request(const AdminRequest& request,
                                                  const AdminAccess& access);

}  // namespace sluice
