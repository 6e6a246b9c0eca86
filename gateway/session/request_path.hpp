// What an admitted request goes through alike, whether an HTTP/1.1
// connection or an HTTP/2 stream carried it: the middleware context it
// starts with, the exchange it asks for, the header rules' variables, the
// head forwarded upstream and the options of the head sent back. Pure
// builders over the request as admitted (request_admission.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/config/config.hpp"
#include "gateway/middleware.hpp"
#include "gateway/route_split.hpp"
#include "gateway/session/pipeline.hpp"
#include "gateway/session/request_admission.hpp"
#include "upstream/exchange/upstream_exchange.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {

// Starts the request's walk through the middleware: the context its steps see.
RequestContext& begin_pipeline(Pipeline& pipeline, const ClientRequest& req,
                               const RequestInfo& info, std::shared_ptr<const Config> config,
                               std::chrono::steady_clock::time_point started);

// The request's key named by hash_on or split_on: the hash of a header's
// value, a cookie's, the client address or the request path; none when the
// request lacks it (an absent or empty header or cookie).
std::optional<std::uint64_t> request_key(const HashOn& on, const RequestInfo& info,
                                         const ClientRequest& req);

// The upstream of the request: its route's one, or its route's split's choice.
const UpstreamConfig& choose_upstream(RouteSplits& splits,
                                      const std::shared_ptr<const Config>& config,
                                      const RequestInfo& info, const ClientRequest& req);

// The exchange of the request with `upstream` (choose_upstream's).
ExchangeRequest exchange_request(const Config& config, const UpstreamConfig& upstream,
                                 const RequestInfo& info, const ClientRequest& req);

// The request headers of a route that Sluice reads and never forwards, in the
// head or in trailers: its cost_header, and its cost_from_response header (a
// client's own copy, reflected by the upstream, would set what the request is
// charged).
SluiceOnlyHeaders sluice_only_headers(const RouteConfig& route);

// The variables the route's header rules use, set only when it has rules
// (`client_ip_text` holds the text `vars` points at, made only when a value
// names ${client_ip}).
void set_header_vars(const RequestInfo& info, std::string& client_ip_text, HeaderVars& vars);

// The request head as it goes upstream, prepared into `head`: the forwarded
// headers, the identity the middleware resolved, the route's request rules,
// and the framing read from the client (chunked, or `content_length`).
void prepare_forwarded_head(UpstreamHead& head, const ClientRequest& req, const RequestInfo& info,
                            const RequestContext& ctx, const HeaderVars& vars,
                            std::string_view peer_text,
                            std::optional<std::uint64_t> content_length);

// The options of the response head sent back: the request id, the
// middleware's headers (`extra`) and the route's response rules.
ResponseHeadOptions response_head_options(const RequestInfo& info, const HeaderList& extra,
                                          const HeaderVars& vars);

}  // namespace sluice
