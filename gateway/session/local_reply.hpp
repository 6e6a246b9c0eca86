// Local replies (errors Sluice answers without an upstream): pure builders of the
// status and small JSON body Sluice answers with itself.
#pragma once

#include <string>
#include <string_view>

#include "gateway/middleware.hpp"

namespace sluice {

// {"status":404,"error":"Not Found","message":"...","request_id":"..."}
LocalReply make_local_reply(unsigned status, std::string_view message, std::string_view request_id);

// Adds "trace_id" (32 hex digits, as the access log has it) as the first
// member of a JSON reply's body (application/json or problem+json, a body
// that is an object, not verbatim); other replies are left as they are.
void with_trace_id(LocalReply& reply, std::string_view trace_id);

// What a local reply's HTTP/1.1 head says besides the reply itself.
struct LocalHeadOptions {
  std::string_view request_id;
  const HeaderList* steps = nullptr;  // headers the request's steps set (rate-limit headers)
  std::size_t content_length = 0;     // the body's size (also for a HEAD request, sent without it)
  bool keep_alive = true;             // false: "Connection: close"
  bool announce_keep_alive = false;   // an HTTP/1.0 client kept alive: "Connection: keep-alive"
};

// The head of a local reply for an HTTP/1.1 connection: "HTTP/1.1 status
// reason", Server, Content-Type, X-Request-Id, the steps' headers and the
// reply's own, a later one replacing an earlier of the same name (any case),
// then Content-Length and Connection (framing names in the lists are dropped).
void serialize_local_head(std::string& out, const LocalReply& reply,
                          const LocalHeadOptions& options);

// The standard reason phrase for the statuses Sluice produces.
std::string_view reason_for(unsigned status);

}  // namespace sluice
