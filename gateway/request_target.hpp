// Request-target and Host hygiene: pure functions that decide, once per
// request, which path the gateway routes, keys and forwards, and refuse
// targets and Host values that components could read differently.
//
// Path normalization (origin-form "path?query"):
//   - a '#' anywhere in the target, or a control character (0x00-0x20, 0x7F),
//     is refused;
//   - every '%' must start an escape of two hex digits ("%", "%2", "%zz" are
//     refused);
//   - an escape of an unreserved character (ALPHA DIGIT - . _ ~) is decoded;
//     the escapes that remain keep their value with upper-case hex digits
//     ("%3a" becomes "%3A"; "%25" stays "%25", nothing is decoded twice);
//   - an escaped '/' (%2F), '\' (%5C) or NUL (%00), and a raw '\', are refused;
//   - runs of '/' are merged into one;
//   - a segment that is "." or ".." once decoded and without its parameters
//     is refused ("/%2e%2e/", "/..;x/").
// The query string is forwarded as received.
//
// Path parameters: in a segment, ';' starts parameters that run to the next
// '/'. The forwarded path keeps them; the route path, which routing and path
// rate-limit keys see, drops them (and merges the '/' runs that leaves), so
// "/api;x/y" is routed and keyed as "/api/y" and forwarded as "/api;x/y".
//
// Paths are case-sensitive: "/API" and "/api" are different paths, routed
// and keyed apart. Only the hex digits of escapes are case-normalized.
//
// Host: an authority without userinfo: host [":" port], where host is an
// IP literal in brackets (IPv6 or "v<hex>.<chars>"), or a non-empty reg-name
// of unreserved characters, sub-delims ("!$&'()*+,;=") and well-formed
// escapes (an IPv4 address is a reg-name); port is 1 to 5 digits, at most
// 65535. Anything else ("a b", "a/b", "", "user@h", "h:") is refused.
//
// Absolute-form ("http://host/path?query"): only the schemes http and https
// (any case), followed by "//" and a valid, non-empty authority. The path
// (or "/" when there is none) and query form the origin-form target, and the
// authority replaces the Host header.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

struct NormalizedTarget {
  std::string target;      // forwarded: the normalized path, then "?query" as received
  std::string route_path;  // the normalized path without ";parameters": routes and path keys
};

// Normalizes an origin-form target ("/...") or the asterisk-form "*" into
// `out`, whose buffers are reused. Returns an empty view when the target is
// accepted, otherwise why not (a 400); `out` is then unspecified.
std::string_view normalize_target(std::string_view target, NormalizedTarget& out);

struct AbsoluteForm {
  std::string target;      // origin-form: the path ("/" when empty) and the query, as sent
  std::string authority;   // the validated authority, for Host
  std::string_view error;  // non-empty when the target is refused
};

// Splits an absolute-form target (anything not origin-form or "*"). The
// returned target is not yet normalized.
AbsoluteForm split_absolute_form(std::string_view target);

// Empty when `host` is a valid Host value (see above), otherwise why not.
std::string_view check_host(std::string_view host);

// The route path of a normalized path (";parameters" dropped, '/' runs merged).
std::string route_path_of(std::string_view path);

// For strip_prefix: the length of the shortest prefix of the forwarded path
// `path` whose route path is `route_prefix`, including the parameters of the
// segment where it ends; nullopt when the route path of `path` does not start
// with `route_prefix`.
std::optional<std::size_t> forwarded_prefix_length(std::string_view path,
                                                   std::string_view route_prefix);

}  // namespace sluice
