// The request head as it goes upstream, in neither protocol's form: the
// method, the target and the fields in order (the client's, minus what Sluice
// replaces or drops, then Sluice's own), with the framing apart. The rule for
// which fields go is proxy_headers.hpp's prepare_request_head; the two
// writers here put a prepared head in HTTP/1.1 text or in HTTP/2 fields.
//
// Prepared once per request by whoever holds the client's request: the
// fields are views into that request's head and into the strings this
// object keeps (forwarded lists, rendered rule values), so it lives as long
// as the request, and its capacity is reused by the next one. An HTTP/2
// stream's request has no next one: its field list and target go back to
// the thread's spares (common/spares.hpp) when it ends, for the next
// stream's head. Pure code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

class H2HeaderBlock;  // upstream/h2/h2_header_block.hpp

struct UpstreamHead {
  using Field = std::pair<std::string_view, std::string_view>;

  std::string_view method;
  std::string_view target;
  // Every field that goes, in order; a WebSocket handshake's Connection and
  // Upgrade among them.
  std::vector<Field> fields;
  bool has_host = false;  // Host is among the fields
  // Where the server's name goes as Host when the request had none (HTTP/1.0).
  std::size_t host_at = 0;
  bool chunked = false;   // the body goes chunked (HTTP/1.1)
  std::optional<std::uint64_t> content_length;  // else the length, when known

  // What the views above may point into.
  std::string target_text;
  std::string forwarded_for;
  std::string via;
  std::string accept_encoding;
  std::vector<std::string> rule_values;

  UpstreamHead() = default;
  // Only a head whose views point outside it may be moved: a prepared
  // head's short strings live inside the object.
  UpstreamHead(UpstreamHead&&) = default;
  UpstreamHead& operator=(UpstreamHead&&) = default;
  ~UpstreamHead();  // the field list and target go back to the spares

  // Ready for the next request's head (the strings keep their capacity).
  void clear();
  // Before each head: a field list from the thread's spares while this one
  // has none, and a target string while this one is too short for
  // `target_size` bytes, with the capacity an earlier head left them.
  void take_spares(std::size_t target_size);
};

// One HTTP/1.1 header line, "Name: value\r\n", appended to `out` (request
// and response heads alike).
void append_http1_field(std::string& out, std::string_view name, std::string_view value);

// The head as HTTP/1.1 text: "METHOD target HTTP/1.1", the fields, Host
// `upstream_host` when the request had none, the framing, the blank line.
void write_http1_head(std::string& out, const UpstreamHead& head, std::string_view upstream_host);

// The head as HTTP/2 fields: the pseudo-headers (:method, :scheme as given,
// :authority from Host or `upstream_host`, :path), then the fields with
// lower-case names, without those HTTP/2 forbids (Connection, Keep-Alive,
// Proxy-Connection, Transfer-Encoding, Upgrade, Host; TE unless "trailers"),
// and Content-Length when known. A gRPC request (content-type
// application/grpc...) carries "te: trailers", which gRPC servers ask for.
// `out` is cleared first (its buffers kept).
void write_h2_head(H2HeaderBlock& out, const UpstreamHead& head, std::string_view scheme,
                   std::string_view upstream_host);

}  // namespace sluice
