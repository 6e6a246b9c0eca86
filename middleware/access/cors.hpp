// CORS for a route that has a cors section: what a preflight is, the reply
// the gateway gives it, and the headers an admitted cross-origin request's
// response carries (also a 429 the gateway answers itself). Pure: no I/O.
#pragma once

#include <optional>
#include <string_view>

#include "common/header_list.hpp"
#include "gateway/config/config.hpp"

namespace sluice {

// A preflight: OPTIONS with an Origin and an Access-Control-Request-Method.
bool is_cors_preflight(std::string_view method, bool has_origin, bool has_request_method);

// The answer to an allowed preflight: the origin (or "*"), the methods and
// headers the route allows, credentials and max-age as configured.
// `request_headers` is the preflight's Access-Control-Request-Headers (echoed
// when the route lists no allow_headers and it is a list of header names).
HeaderList cors_preflight_headers(const CorsConfig& cors, std::string_view origin,
                                  std::optional<std::string_view> request_headers);

// Adds to `out` the headers of a response to an allowed origin's request.
void append_cors_response_headers(const CorsConfig& cors, std::string_view origin,
                                  HeaderList& out);

}  // namespace sluice
