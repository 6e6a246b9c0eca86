// The request head as the exchange serialized it for HTTP/1.1 (request line,
// fields, the blank line) in HTTP/2 terms for an HTTP/2 upstream, and the
// fields of an HTTP/2 response head. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

using H2Fields = std::vector<std::pair<std::string, std::string>>;

// `head`'s request as HTTP/2 fields: the pseudo-headers first (:method,
// :scheme as given, :authority from Host, :path from the target), then the
// fields with their names in lower case, without the connection-specific
// ones HTTP/2 forbids (Connection and what it names, Keep-Alive,
// Proxy-Connection, Transfer-Encoding, Upgrade, Host; TE unless "trailers").
// A gRPC request (content-type application/grpc...) carries "te: trailers",
// which gRPC servers ask for. Nothing when `head` is not a request head.
std::optional<H2Fields> h2_request_fields(std::string_view head, std::string_view scheme);

// A response's :status value as a status code (100-999), or nothing.
std::optional<unsigned> h2_status(std::string_view value);

// A content-length value (digits only, as HTTP/2 messages carry it) as a
// number, or nothing.
std::optional<std::uint64_t> h2_content_length(std::string_view value);

}  // namespace sluice
