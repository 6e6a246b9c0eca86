// Proxy header semantics, as pure functions over Beast
// header containers: hop-by-hop stripping, forwarded headers, Via, request id.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "upstream/http_fields.hpp"
#include <boost/optional/optional.hpp>

#include "upstream/header_rules.hpp"
#include "upstream/request_head.hpp"

namespace sluice {

class H2HeaderBlock;  // upstream/h2/h2_header_block.hpp

namespace http_fields = boost::beast::http;

// Whether a field name (any case) describes one connection and never crosses
// to another: Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding and
// Upgrade. HTTP/2 forbids them (RFC 9113 8.2.2); over HTTP/1.1 they are among
// the hop-by-hop fields strip_hop_by_hop removes.
bool is_connection_specific(std::string_view name);

// Removes the connection-specific fields and every name Connection lists, and
// TE, Trailer, Proxy-Authorization and Proxy-Authenticate. Framing must be
// redone by the caller afterwards.
void strip_hop_by_hop(HttpFields& fields);

// A WebSocket handshake (RFC 6455 4.1): Connection lists "upgrade" and
// Upgrade lists "websocket", case-insensitively. Asked before stripping.
bool asks_websocket_upgrade(const HttpFields& fields);
// A 101 that accepts it: its Upgrade lists "websocket".
bool grants_websocket_upgrade(const HttpFields& fields);

// Removes every field whose name contains "_" and returns how many there were.
// CGI-style servers map "-" to "_", so X_API_Key would reach them as X-API-Key.
std::size_t erase_underscore_fields(HttpFields& fields);

// Request headers meant for Sluice alone, never forwarded, in the head or in
// trailers (empty: none): a route's cost header, and the usage header its
// upstream answers with.
using SluiceOnlyHeaders = std::array<std::string_view, 2>;
// Whether a field name (any case) is one of `only`.
bool is_sluice_only(const SluiceOnlyHeaders& only, std::string_view name);

struct ForwardedInfo {
  std::string_view client_ip;           // the TCP peer, as text (appended to X-Forwarded-For)
  std::string_view proto;               // "http" or "https"
  std::string_view host;                // the Host header as received (may be empty)
  std::string_view request_id;          // kept or generated id
  std::string_view upstream_host = {};  // Host sent when the request has none (HTTP/1.0)
  SluiceOnlyHeaders drop_headers = {};  // left out of the head
  // Also left out: the headers verified claims go upstream in (a client's own
  // copies are never believed).
  std::span<const std::string> drop_also = {};
  const HeaderRules* rules = nullptr;   // the route's request rules (null: none)
  HeaderVars vars = {};                 // what the rules' values may use
  bool websocket = false;               // forward a WebSocket handshake's Upgrade
  // X-Consumer-Id and X-Consumer-Plan as Sluice resolved them (empty: none).
  std::span<const std::pair<std::string, std::string>> identity = {};
  // A traceparent Sluice started (empty: the request's own goes as it came).
  std::string_view traceparent = {};
  // The response body is read on its way (cost_from_response.body): the
  // client's Accept-Encoding keeps only the codings Sluice decodes.
  bool decodable_codings_only = false;
};

// An Accept-Encoding list (`value`, lines joined by commas) with only the
// codings a response body can be read in: gzip, x-gzip, deflate and identity
// (their q-values kept; br, zstd, compress and "*" left out), appended to
// `out`; "identity" when no gzip, x-gzip or deflate is left.
void append_decodable_codings(std::string& out, std::string_view value);

// The request head for the upstream (request_head.hpp), prepared into `head`:
// the fields (hop-by-hop already stripped) except Expect and
// info.drop_headers, then X-Forwarded-For with the peer appended to any
// incoming values, X-Forwarded-Proto, X-Forwarded-Host (when a Host was
// given), X-Request-Id, Via with "1.1 sluice" appended, then "Connection:
// Upgrade" and "Upgrade: websocket" for a WebSocket handshake, then
// info.traceparent when set, then info.identity (the client's own
// X-Consumer-Id and X-Consumer-Plan lines are never forwarded), then the
// lines info.rules sets (the incoming lines of the names it sets or removes
// are left out); the body chunked when `chunked`, else of `content_length`.
// Content-Length is never copied from `fields`: the framing is the one Sluice
// read. The views in `head` point into `fields`, `info`'s strings and `head`.
void prepare_request_head(UpstreamHead& head, std::string_view method, std::string_view target,
                          const HttpFields& fields, const ForwardedInfo& info,
                          bool chunked, std::optional<std::uint64_t> content_length = {});

// The same written as HTTP/1.1 text at once (info.upstream_host as Host when
// the request has none).
void serialize_request_head(std::string& out, std::string_view method, std::string_view target,
                            const HttpFields& fields, const ForwardedInfo& info,
                            bool chunked, std::optional<std::uint64_t> content_length = {});

// Response heads are serialized straight into one buffer (one write with the
// first body bytes, no per-header allocation), with Sluice's headers added on
// the way.

struct ResponseHeadOptions {
  std::string_view request_id;
  // Headers set by Sluice (rate-limit headers); they replace upstream fields of the same name.
  std::span<const std::pair<std::string, std::string>> extra;
  bool chunked = false;                         // re-frame the body as chunked
  std::optional<std::uint64_t> content_length;  // the parser's; written when not chunked
  bool keep_alive = true;                       // false: "Connection: close"
  bool announce_keep_alive = false;             // HTTP/1.0 client: "Connection: keep-alive"
  const HeaderRules* rules = nullptr;           // the route's response rules (null: none)
  HeaderVars vars = {};                         // what the rules' values may use
  bool websocket = false;  // a 101 accepting a WebSocket upgrade: no framing, Upgrade headers
};

// The response head for the client: "HTTP/1.1 status reason", the upstream
// fields minus hop-by-hop ones (and the names Connection lists) and minus
// X-Request-Id, the names in `extra` and the names options.rules sets or
// removes, then `extra`, X-Request-Id, the lines options.rules sets, framing
// and Connection (for a WebSocket 101: "Connection: Upgrade" and
// "Upgrade: websocket", no framing).
void serialize_response_head(std::string& out, unsigned status, std::string_view reason,
                             const HttpFields& fields, const ResponseHeadOptions& options);

// The same fields as an HTTP/2 client's header block (lower-case names, no
// string per field): the rules' values rendered, Content-Length when
// options.content_length is set, no other framing and no Connection. `out`
// is cleared first.
void response_fields(H2HeaderBlock& out, const HttpFields& fields,
                     const ResponseHeadOptions& options);

// A parser's content length as the serializers above take it.
inline std::optional<std::uint64_t> to_std(const boost::optional<std::uint64_t>& v) {
  return v ? std::optional<std::uint64_t>{*v} : std::nullopt;
}

// A request id is kept when it is 1..128 visible ASCII characters; else a new one is made.
bool is_acceptable_request_id(std::string_view id);

// A new request id: 32 lower-case hex digits, two draws of a per-thread generator
// (unique, not secret: see generate_request_id).
std::string generate_request_id();
// The same, written into `out` (reusing its capacity).
void generate_request_id(std::string& out);
// The same, written to `out`.
void generate_request_id(char (&out)[32]);

}  // namespace sluice
