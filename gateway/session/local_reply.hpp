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

// The standard reason phrase for the statuses Sluice produces.
std::string_view reason_for(unsigned status);

}  // namespace sluice
