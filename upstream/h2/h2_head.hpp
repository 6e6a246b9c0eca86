// HTTP/2 terms for an HTTP/2 upstream: a request's trailers, and the fields
// of a response head (the request head: request_head.hpp). Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "upstream/h2/h2_header_block.hpp"
#include "upstream/http_fields.hpp"
#include "upstream/request_head.hpp"

namespace sluice {

// Trailers as HTTP/2 fields, a request's to an upstream or a response's to a
// client: `out` cleared and filled, names in lower case, without what HTTP/2
// trailers must not carry (pseudo-fields, the connection-specific fields, TE
// and Host).
void h2_trailer_fields(H2HeaderBlock& out, const HttpFields& trailers);

// A response's :status value as a status code (100-999), or nothing.
std::optional<unsigned> h2_status(std::string_view value);

// A content-length value (digits only, as HTTP/2 messages carry it) as a
// number, or nothing.
std::optional<std::uint64_t> h2_content_length(std::string_view value);

}  // namespace sluice
