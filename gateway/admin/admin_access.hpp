// Who may call the admin endpoints that read or change state beyond the
// process's own health (the bucket, top and consumer APIs, and any later
// endpoint registered as protected): with an admin token configured, only a
// request carrying it as `Authorization: Bearer <token>`; without one, only a
// request to an admin listener bound to a loopback address; and in both
// cases never a web browser's request from another site (below). Pure
// functions, no I/O; the Application keeps the AdminAccess in force on the
// main thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// What keeps a web browser on the admin's host from using the protected
// endpoints, whatever the token: a page of any site can make a browser send "simple" requests
// (a form, text/plain) to a loopback address, and a name it controls can be
// made to resolve to 127.0.0.1 (DNS rebinding) so that the page reads the
// answers. The rules, asked of a request's head before any body byte is read:
//   - Host is a loopback literal (127.0.0.0/8, ::1; with or without a port,
//     IPv6 in brackets), "localhost", the address the connection arrived on,
//     or a name of admin.hosts; anything else is 403 (a rebinding page's Host
//     is its own name, never an address literal);
//   - Origin, when present, is the admin's own origin: "http://" + that Host;
//     Sec-Fetch-Site, when present, is same-origin or none (a page on another
//     port of the same host is "same-site", and is refused); else 403;
//   - a request with a body method (POST, PUT, PATCH) to an endpoint that
//     takes a body carries that endpoint's Content-Type (parameters such as
//     charset aside) or none, else 415: a browser cannot send
//     application/json or application/x-ndjson across sites without asking
//     first (a preflight, which the admin never allows), its forms and
//     text/plain requests carry their type, and a POST or PUT of a browser
//     without one carries Origin (the rule above).

// The host of a Host value without its port ("[::1]:9901" -> "::1"); nullopt
// when the value is not host[:port] (an empty host, a bad port, a bracket
// without its pair).
std::optional<std::string_view> host_without_port(std::string_view host);

// Whether a Host value names the admin as the rules above allow: `local` is
// the address the connection arrived on, `names` is admin.hosts.
bool admin_host_allowed(std::string_view host, std::string_view local,
                        const std::vector<std::string>& names);

// The media type of a Content-Type value, without parameters or spaces
// (compare case-insensitively).
std::string_view media_type(std::string_view content_type);

// The refusal of a request's head under the rules above (403 or 415, as
// problem+json), or nullopt. `body_type` is the endpoint's own Content-Type
// (empty: it takes no body).
std::optional<AdminResponse> refuse_browser_request(const AdminRequest& head,
                                                    std::string_view local,
                                                    const std::vector<std::string>& names,
                                                    std::string_view body_type);

}  // namespace sluice
