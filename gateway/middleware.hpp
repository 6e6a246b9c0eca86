// The middleware chain: each middleware either continues or
// responds, exactly once, and never from inside the call that started it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/client_ip.hpp"
#include "gateway/config/config.hpp"

namespace sluice {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// A reply made by Sluice itself rather than by an upstream.
struct LocalReply {
  unsigned status = 500;
  std::string content_type = "application/json";
  std::string body;
  HeaderList headers;             // extra headers (Allow, Retry-After, ...)
  bool close_connection = false;  // close the client connection after this reply
};

// What the middleware sees of a request. Header values are looked up by name
// (case-insensitive): `header` gives the first line of a header, and
// `header_count` how many lines of it there are. The views stay valid until
// the request completes.
struct RequestContext {
  std::shared_ptr<const Config> config;
  const RouteConfig* route = nullptr;
  std::string_view method;
  std::string_view target;
  std::string_view route_path;  // the normalized path without ";parameters" (request_target.hpp)
  std::function<std::optional<std::string_view>(std::string_view)> header;
  std::function<std::size_t(std::string_view)> header_count;
  IpAddress client_ip;
  std::string request_id;
  std::chrono::steady_clock::time_point started;
  HeaderList response_headers;  // added to whatever response goes back (upstream or local)
};

// What is known of a finished exchange (for the access log and the like).
struct ExchangeSummary {
  std::string_view route;  // empty when no route matched
  std::string_view method;
  std::string_view target;  // as received
  unsigned status = 0;
  IpAddress client_ip;
  std::string_view request_id;
  std::string_view upstream_server;  // "host:port", empty for local replies
  double duration_seconds = 0;
  bool local = false;  // answered by Sluice itself
};

// The outcome of one middleware: continue (nullopt) or answer with a reply.
using MiddlewareDone = std::function<void(std::optional<LocalReply>)>;

class Middleware {
 public:
  virtual ~Middleware() = default;
  // Called on the session's (worker's) executor. `done` must be called exactly
  // once, on that executor, and never from inside on_request (post it).
  virtual void on_request(RequestContext& ctx, MiddlewareDone done) = 0;
  // False when on_request would only continue for this request: the session
  // then skips the call (and the posted completion that goes with it).
  virtual bool applies(const RequestContext&) const { return true; }
  // Called on the worker's executor once the response has been sent (or the
  // exchange abandoned), for every request, routed or not.
  virtual void on_complete(const Config&, const ExchangeSummary&) {}
};

using MiddlewareChain = std::vector<std::shared_ptr<Middleware>>;

}  // namespace sluice
