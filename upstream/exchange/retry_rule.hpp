// When a failed attempt at an upstream is made again, decided from what is
// known when it failed. Pure; used by the upstream exchange.
//
// - A connect that failed (refused, reset, unresolvable or timed out) sent
//   nothing: an idempotent request goes to the next server, once (two
//   servers tried at most).
// - A request that failed on a pooled connection before any response byte
//   (the server had closed it: end of stream, reset, broken pipe) goes once
//   more on a new connection to the same server, when it is idempotent and
//   has no body, so nothing of it is lost by having been sent. A timeout is
//   never sent again.
// - An HTTP/2 stream the server refused (RST_STREAM REFUSED_STREAM, or a
//   GOAWAY whose last-stream-id is below it) was never processed, whatever
//   its method: it goes again, where a stream can be taken, while none of its
//   body was read (a body cannot be read twice), up to kMaxRefusedRetries
//   times (a server that refuses everything is not asked forever).
#pragma once

#include <cstddef>

#include <boost/beast/http/verb.hpp>

namespace sluice {

struct FailedAttempt {
  enum class Stage { kConnect, kExchange };
  Stage stage = Stage::kConnect;
  bool idempotent = false;       // GET, HEAD, OPTIONS, PUT or DELETE
  std::size_t servers_tried = 0;  // including this attempt's
  // kExchange only:
  bool timed_out = false;
  bool closed_by_server = false;   // end of stream, reset or broken pipe
  bool pooled_connection = false;  // the connection came from the pool
  bool retried_on_fresh = false;   // this request went again on a new connection already
  bool body_empty = false;         // the request has no body at all
  bool response_started = false;   // a response byte arrived (parsed or buffered)
  // HTTP/2: the server refused the stream unprocessed, and none of its body was read.
  bool refused = false;
  std::size_t refused_before = 0;  // times this request was refused already
};

// Refused HTTP/2 streams sent again, at most, for one request.
inline constexpr std::size_t kMaxRefusedRetries = 3;

// kAnotherStream: a new stream to the same server, wherever one can be taken.
enum class Retry { kNo, kNextServer, kFreshConnection, kAnotherStream };

// GET, HEAD, OPTIONS, PUT and DELETE (FailedAttempt::idempotent).
bool is_idempotent(boost::beast::http::verb method);

Retry retry_rule(const FailedAttempt& attempt);

}  // namespace sluice
