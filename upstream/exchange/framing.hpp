// Message framing decisions, as pure functions: how one relayed piece goes on
// the wire, how a response body is framed towards the client, which response
// transfer codings can be relayed, and whether the client connection stays
// open after a response (and the upstream connection goes back to the pool). No I/O; the buffers
// they fill point at the caller's memory.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include <boost/asio/buffer.hpp>

#include "upstream/http_fields.hpp"

namespace sluice {

// Storage for one chunk-size line ("1f40\r\n"); it must outlive the write.
struct ChunkPrefix {
  char text[24];
};

// One relayed piece as a single gather-write: `head` when not empty, then `n`
// bytes of `data` as they are or as one chunk, then the last chunk when
// `chunked && last`. Returns how many buffers of `out` are used.
using PieceBuffers = std::array<boost::asio::const_buffer, 5>;
std::size_t frame_piece(PieceBuffers& out, std::string_view head, const char* data, std::size_t n,
                        bool chunked, bool last, ChunkPrefix& prefix);

// How a response body goes to the client: Content-Length passes through; a body
// of unknown length is chunked for an HTTP/1.1 client and ends with the
// connection for an HTTP/1.0 one.
struct ResponseFraming {
  bool chunked = false;          // re-framed as chunked
  bool ends_with_close = false;  // the body's end is the connection's close
};
ResponseFraming frame_response(bool has_body, bool has_content_length, bool client_http11);

// Sluice re-frames bodies itself, so a response can be relayed only with no
// Transfer-Encoding or with exactly "chunked" (once).
bool relayable_transfer_coding(const HttpFields& fields);

// What decides whether the client connection stays open after a response.
struct KeepAliveFacts {
  bool client_asked = false;     // the request allows it (HTTP/1.1, or 1.0 with keep-alive)
  bool draining = false;         // the gateway is draining
  bool must_close = false;       // the reply closes (a refused or half-read request)
  bool ends_with_close = false;  // the response body is delimited by the close
};
// The one keep-alive decision: open only when the client asked for it and
// nothing requires the close.
constexpr bool keep_client_alive(const KeepAliveFacts& f) {
  return f.client_asked && !f.draining && !f.must_close && !f.ends_with_close;
}

// The upstream side of keep-alive: a connection goes back to the pool only
// after a complete exchange (request and response read to their end) on a
// connection the upstream keeps open, with no byte of it left unread, and
// never after an Upgrade request: an upstream that refused the upgrade (200,
// 426) may still have switched protocols, and would take the next client's
// request into its tunnel.
struct UpstreamReuseFacts {
  bool upstream_keep_alive = false;  // the response allows keep-alive
  bool response_done = false;
  bool request_done = false;
  bool nothing_buffered = false;  // no byte beyond the response was read
  bool upgrade_asked = false;     // the request carried Upgrade (a WebSocket handshake)
};
constexpr bool reuse_upstream(const UpstreamReuseFacts& f) {
  return f.upstream_keep_alive && f.response_done && f.request_done && f.nothing_buffered &&
         !f.upgrade_asked;
}

}  // namespace sluice
