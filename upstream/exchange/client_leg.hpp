// The client's side of one upstream exchange, in whatever protocol the client
// speaks (an HTTP/1.1 connection, an HTTP/2 stream): the request body is read
// from it (a body source), the response is sent to it (a sink). The exchange
// knows nothing of how either is framed.
//
// Each operation started here completes by calling the exchange back
// (UpstreamExchange::on_body_read, on_continue_sent, on_response_sent) once,
// on the worker's executor, never from inside the call that started it, and
// with the leg's owner (which owns the exchange) held alive meanwhile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>

#include "upstream/byte_stream.hpp"
#include "upstream/http_fields.hpp"

namespace sluice {

// What the sink needs of a response head from the upstream.
struct ResponseStart {
  unsigned status = 0;
  std::string_view reason;
  // The upstream's fields, hop-by-hop ones included (the sink drops them).
  const HttpFields* fields = nullptr;
  std::optional<std::uint64_t> content_length;  // as the upstream framed it
  bool has_body = false;  // a body follows (not a HEAD answer, 204, 304 or Content-Length: 0)
};

// An HTTP/1.1 client connection's stream and read buffer, handed to a
// WebSocket tunnel.
struct UpgradeStreams {
  ByteStream* stream = nullptr;
  boost::beast::flat_buffer* buffered = nullptr;  // what the client sent after its handshake
};

class ClientLeg {
 public:
  virtual ~ClientLeg() = default;

  // ---- The request body (a source) ----
  // The body was read to its end (or there is none).
  virtual bool body_done() const = 0;
  // Body bytes are at hand already (they came with the head): the request
  // head then goes upstream in one write with them.
  virtual bool body_at_hand() const = 0;
  // The client waits for "100 Continue" before it sends its body.
  virtual bool expects_continue() const = 0;
  // Tells the client to go on sending its body -> on_continue_sent(ec).
  virtual void send_continue() = 0;
  // Reads the next piece of the body into `into` -> on_body_read(ec, n);
  // body_done() then tells whether it was the last.
  virtual void read_body(std::span<char> into) = 0;
  // Ends a read_body in flight at once (on_body_read with
  // operation_aborted), where the leg can; else it completes as it would.
  virtual void cancel_read() {}
  // The trailers that ended the body, once body_done() (null: none).
  virtual const HttpFields* request_trailers() const { return nullptr; }
  // Whether a body read and a response send may be in flight at once (an
  // HTTP/2 stream: a bidirectional gRPC call); otherwise the response is
  // relayed only once the request went whole.
  virtual bool full_duplex() const { return false; }

  // ---- The response (a sink) ----
  // The response head; it goes with the first send_response.
  virtual void start_response(const ResponseStart& start) = 0;
  // `n` bytes of the body (none: only the head), and its end when `last`
  // -> on_response_sent(ec).
  virtual void send_response(const char* data, std::size_t n, bool last) = 0;
  // The trailers that end the response, given before its last
  // send_response; a leg that cannot send trailers drops them (HTTP/1.1).
  virtual void set_response_trailers(const HttpFields& trailers) {
    (void)trailers;
  }
  // Whether the client's connection stays open after the response (decided
  // by start_response).
  virtual bool keeps_client() const = 0;

  // A WebSocket upgrade: the client's streams (HTTP/1.1 only; null
  // otherwise), and the 101 head start_response prepared, which the tunnel
  // sends first.
  virtual UpgradeStreams upgrade_streams() { return {}; }
  virtual std::string upgrade_head() { return {}; }
};

}  // namespace sluice
