#include "gateway/session/request_path.hpp"

#include "common/cookies.hpp"
#include "gateway/router.hpp"
#include "gateway/session/grpc_reply.hpp"
#include "upstream/balance/stable_hash.hpp"
#include "upstream/field_scan.hpp"

namespace sluice {

namespace http = boost::beast::http;

std::optional<std::uint64_t> request_key(const HashOn& on, const RequestInfo& info,
                                         const ClientRequest& req) {
  switch (on.source) {
    case HashOn::Source::kIp: {
      const auto& bytes = info.client_ip.bytes;
      return stable_hash({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
    }
    case HashOn::Source::kPath:
      return stable_hash(info.target.route_path);
    case HashOn::Source::kHeader: {
      const auto value = field_value(req, FieldName(on.name));
      if (value.empty()) return std::nullopt;
      return stable_hash(value);
    }
    case HashOn::Source::kCookie: {
      // HTTP/2 may send the cookies in several lines.
      std::optional<std::string_view> found;
      for_each_field(req, FieldName(http::field::cookie), [&](std::string_view line) {
        if (!found) found = cookie_value(line, on.name);
      });
      if (!found || found->empty()) return std::nullopt;
      return stable_hash(*found);
    }
  }
  return std::nullopt;
}

const UpstreamConfig& choose_upstream(RouteSplits& splits,
                                      const std::shared_ptr<const Config>& config,
                                      const RequestInfo& info, const ClientRequest& req) {
  const RouteConfig& route = *info.route;
  std::optional<std::uint64_t> key;
  if (route.split.split_on) key = request_key(*route.split.split_on, info, req);
  return splits.upstream_for(config, route, key);
}

RequestContext& begin_pipeline(Pipeline& pipeline, const ClientRequest& req,
                               const RequestInfo& info, std::shared_ptr<const Config> config,
                               std::chrono::steady_clock::time_point started) {
  auto& ctx = pipeline.begin(req.base());
  ctx.config = std::move(config);
  ctx.route = info.route;
  ctx.method = req.method_string();
  ctx.target = req.target();
  ctx.route_path = info.target.route_path;
  ctx.client_ip = info.client_ip;
  ctx.request_id = info.request_id;
  ctx.started = started;
  ctx.decision.traced = info.recorded;
  return ctx;
}

ExchangeRequest exchange_request(const Config& config, const UpstreamConfig& upstream,
                                 const RequestInfo& info, const ClientRequest& req) {
  ExchangeRequest request;
  request.upstream = &upstream;
  request.method = req.method();
  request.send_timeout = config.server.send_timeout;
  request.chunked = info.body.chunked;
  request.body_empty = info.body.done;
  request.websocket = info.websocket;
  request.tunnel_idle_timeout = config.server.idle_timeout;
  request.usage_header = info.route->cost_from_response.header;
  if (upstream.hash_on) request.hash_key = request_key(*upstream.hash_on, info, req);
  // A gRPC call's own deadline bounds its exchange (the header goes upstream too).
  if (is_grpc_content_type(field_value(req, http::field::content_type))) {
    if (const auto it = req.find("grpc-timeout"); it != req.end()) {
      if (auto timeout = parse_grpc_timeout(it->value())) request.deadline = *timeout;
    }
  }
  // The route's timeout bounds the whole exchange, with the call's own
  // deadline when it has one (whichever ends first).
  const RouteTimeouts& timeouts = info.route->timeouts;
  if (timeouts.total.count() > 0 &&
      (request.deadline.count() == 0 || timeouts.total < request.deadline)) {
    request.deadline = timeouts.total;
  }
  request.response_timeout = timeouts.idle;
  if (info.route->retry) request.retry = &*info.route->retry;
  return request;
}

SluiceOnlyHeaders sluice_only_headers(const RouteConfig& route) {
  return {route.cost_header, route.cost_from_response.header};
}

void set_header_vars(const RequestInfo& info, std::string& client_ip_text, HeaderVars& vars) {
  const RouteConfig& route = *info.route;
  if (route.request_headers.empty() && route.response_headers.empty()) return;
  // The client IP's text only for a value that names it (a constant value is
  // the usual rule).
  if (route.request_headers.uses_client_ip() || route.response_headers.uses_client_ip()) {
    client_ip_text = info.client_ip.to_string();
  }
  vars = {client_ip_text, info.request_id, route.name, info.forwarded_proto};
}

void prepare_forwarded_head(UpstreamHead& head, const ClientRequest& req, const RequestInfo& info,
                            const RequestContext& ctx, const HeaderVars& vars,
                            std::string_view peer_text,
                            std::optional<std::uint64_t> content_length) {
  const RouteConfig& route = *info.route;
  ForwardedInfo forwarded{peer_text, info.forwarded_proto, field_value(req, http::field::host),
                          info.request_id};
  forwarded.drop_headers = sluice_only_headers(route);
  forwarded.websocket = info.websocket;
  forwarded.traceparent = info.traceparent;
  forwarded.identity = ctx.identity_headers;
  forwarded.drop_also = route.identity_headers;
  forwarded.decodable_codings_only = route.cost_from_response.body.has_value();
  if (!route.request_headers.empty()) {
    forwarded.rules = &route.request_headers;
    forwarded.vars = vars;
  }
  const auto rewritten = rewritten_target(route, req.target());
  const std::string_view client_target = req.target();
  prepare_request_head(head, req.method_string(), rewritten ? *rewritten : client_target,
                       req.base(), forwarded, info.body.chunked, content_length);
}

ResponseHeadOptions response_head_options(const RequestInfo& info, const HeaderList& extra,
                                          const HeaderVars& vars) {
  ResponseHeadOptions options;
  options.request_id = info.request_id;
  options.extra = extra;
  const RouteConfig& route = *info.route;
  if (!route.response_headers.empty()) {
    options.rules = &route.response_headers;
    options.vars = vars;
  }
  return options;
}

}  // namespace sluice
