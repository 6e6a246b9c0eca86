// Proxy header semantics (spec section 5), as pure functions over Beast
// header containers: hop-by-hop stripping, forwarded headers, Via, request id.
#pragma once

#include <string>
#include <string_view>

#include <boost/beast/http/fields.hpp>

namespace sluice {

namespace http_fields = boost::beast::http;

// Removes Connection and every name it lists, Keep-Alive, Proxy-Connection,
// TE, Trailer, Transfer-Encoding, Upgrade, Proxy-Authorization and
// Proxy-Authenticate. Framing must be redone by the caller afterwards.
void strip_hop_by_hop(http_fields::fields& fields);

struct ForwardedInfo {
  std::string_view client_ip;   // the TCP peer, as text (appended to X-Forwarded-For)
  std::string_view proto;       // "http" or "https"
  std::string_view host;        // the Host header as received (may be empty)
  std::string_view request_id;  // kept or generated id
};

// After strip_hop_by_hop: appends the peer to X-Forwarded-For (joining any
// incoming values into one header), sets X-Forwarded-Proto, X-Forwarded-Host
// (when a Host was given), X-Request-Id and appends "1.1 sluice" to Via.
void add_forwarded_headers(http_fields::fields& fields, const ForwardedInfo& info);

// A request id is kept when it is 1..128 visible ASCII characters; else a new one is made.
bool is_acceptable_request_id(std::string_view id);

// A new random request id: 32 lower-case hex digits (128 random bits).
std::string generate_request_id();

}  // namespace sluice
