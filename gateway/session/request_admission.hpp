// Request admission: a pure function (no I/O) from a parsed request head, the
// TCP peer and the config to what the gateway knows of the request, or the
// local reply that refuses it. It holds the framing rules against request
// smuggling (Content-Length with Transfer-Encoding, repeated Host or
// Transfer-Encoding, codings other than chunked, Transfer-Encoding in
// HTTP/1.0), Host and request-target hygiene (absolute form, dot segments:
// see gateway/request_target.hpp), hop-by-hop stripping, underscore header names, the
// request id, the client IP and forwarded scheme, and the route.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/message.hpp>

#include "gateway/client_ip.hpp"
#include "gateway/config/config.hpp"
#include "gateway/middleware.hpp"
#include "gateway/request_target.hpp"
#include "upstream/http_fields.hpp"

namespace sluice {

using ClientRequest = boost::beast::http::request<boost::beast::http::buffer_body, HttpFields>;

// What the parser knows of the request's body when the head is read.
struct BodyFacts {
  bool chunked = false;  // framed as chunked
  bool done = false;     // no body at all: the whole request has been read
};

// What is known of an admitted request. Reused by a connection's requests:
// its strings keep their capacity. Those most requests fill (their target,
// route path, ids and traceparent) take their buffers from the thread's
// spares when made and give them back when it goes: an HTTP/2 stream has
// one of its own.
struct RequestInfo {
  RequestInfo();
  ~RequestInfo();
  RequestInfo(const RequestInfo&) = delete;
  RequestInfo& operator=(const RequestInfo&) = delete;

  NormalizedTarget target;      // forwarded target and route path
  std::string original_target;  // as received, set only when the target was rewritten
  std::string request_id;       // kept from X-Request-Id or generated; also set on refusal
  // The W3C trace id of the request's traceparent (kept or new: trace_context.hpp).
  std::string trace_id;
  // The traceparent Sluice started for the request (sent upstream in place of
  // a missing or refused one, or naming Sluice's span as the parent); empty
  // when the request's own is kept.
  std::string traceparent;
  // With tracing on and the trace sampled (recorded): the id of Sluice's span
  // for the request, and its parent's from the request's traceparent (empty:
  // the trace starts here).
  bool recorded = false;
  std::string span_id;
  std::string parent_span_id;
  IpAddress client_ip;          // the peer or the right-most untrusted X-Forwarded-For entry
  // "https" on a TLS connection, or from a trusted proxy that says so
  std::string_view forwarded_proto = "http";
  const RouteConfig* route = nullptr;
  bool keep_alive = false;  // the request allows keep-alive
  // A WebSocket handshake: an HTTP/1.1 GET without a body whose Connection
  // lists "upgrade" and Upgrade lists "websocket". Any other Upgrade is
  // stripped with the hop-by-hop headers.
  bool websocket = false;
  BodyFacts body;
};

// Admits `req` (its head as parsed) or refuses it. Admission rewrites the head
// it forwards: an absolute-form target becomes origin-form with its authority
// as Host, the target is normalized, hop-by-hop headers and (as configured)
// underscore names are dropped. A refusal's close_connection is set when the
// connection cannot carry another request after it. `over_tls`: the client
// connection is TLS.
std::optional<LocalReply> admit_request(ClientRequest& req, BodyFacts body, const IpAddress& peer,
                                        bool over_tls, const Config& config, RequestInfo& info);

}  // namespace sluice
