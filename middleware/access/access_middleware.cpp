#include "middleware/access/access_middleware.hpp"

#include "middleware/access/cors.hpp"

namespace sluice {
namespace {

constexpr MetricFamily kAccessFamilies[] = {
    {"sluice_access_denied_total", "counter",
     "Requests refused before the limiter, by route and reason (ip_denied: a deny entry holds the "
     "client address; ip_not_allowed: no allow entry does; cors_origin: a preflight from an "
     "origin the route's cors does not allow)."},
};

// The reasons, in the order their series are seeded.
constexpr std::string_view kIpDenied = "ip_denied";
constexpr std::string_view kIpNotAllowed = "ip_not_allowed";
constexpr std::string_view kCorsOrigin = "cors_origin";

LocalReply forbidden(std::string_view detail) {
  LocalReply reply;
  reply.status = 403;
  reply.content_type = "application/problem+json";
  reply.body = R"({"type":"about:blank","title":"Forbidden","status":403,"detail":")";
  reply.body += detail;  // our own text: nothing to escape
  reply.body += "\"}";
  reply.headers.emplace_back("Cache-Control", "no-store");
  return reply;
}

}  // namespace

std::span<const MetricFamily> access_metric_families() { return kAccessFamilies; }

void seed_access_metrics(const Config& config, MetricsShard& metrics) {
  for (const auto& route : config.routes) {
    const bool allow = config.ip_access.has_allow || route.ip_access.has_allow;
    const bool deny = config.ip_access.has_deny || route.ip_access.has_deny;
    if (deny) {
      metrics.declare("sluice_access_denied_total",
                      scratch_labels({{"route", route.name}, {"reason", kIpDenied}}));
    }
    if (allow) {
      metrics.declare("sluice_access_denied_total",
                      scratch_labels({{"route", route.name}, {"reason", kIpNotAllowed}}));
    }
    if (route.cors.enabled) {
      metrics.declare("sluice_access_denied_total",
                      scratch_labels({{"route", route.name}, {"reason", kCorsOrigin}}));
    }
  }
}

MiddlewareResult AccessMiddleware::refuse(const RequestContext& ctx, std::string_view reason,
                                          std::string_view detail) {
  metrics_.add("sluice_access_denied_total",
               scratch_labels({{"route", ctx.route->name}, {"reason", reason}}));
  return MiddlewareResult::respond(forbidden(detail));
}

MiddlewareResult AccessMiddleware::on_request(RequestContext& ctx, MiddlewareLater&) {
  const RouteConfig* route = ctx.route;
  if (!route) return MiddlewareResult::next();
  for (const IpAccessConfig* list : {&ctx.config->ip_access, &route->ip_access}) {
    switch (list->check(ctx.client_ip)) {
      case IpAccessConfig::Result::kAllowed:
        break;
      case IpAccessConfig::Result::kDenied:
        return refuse(ctx, kIpDenied, "the client address is denied");
      case IpAccessConfig::Result::kNotAllowed:
        return refuse(ctx, kIpNotAllowed, "the client address is not allowed");
    }
  }
  const CorsConfig& cors = route->cors;
  if (!cors.enabled) return MiddlewareResult::next();
  const auto origin = ctx.header("Origin");
  // An answer that names origins varies by Origin, also when it names none:
  // a shared cache must not hand one page's answer to another.
  const bool varies = !(cors.any_origin && !cors.allow_credentials);
  if (!origin) {  // not a cross-origin request
    if (varies) ctx.response_headers.emplace_back("Vary", "Origin");
    return MiddlewareResult::next();
  }
  const auto request_method = ctx.header("Access-Control-Request-Method");
  const bool allowed = cors.allows(*origin);
  if (is_cors_preflight(ctx.method, true, request_method.has_value())) {
    if (!allowed) return refuse(ctx, kCorsOrigin, "the origin may not call this route");
    LocalReply reply;
    reply.status = 200;
    reply.content_type.clear();  // no body
    reply.headers = cors_preflight_headers(cors, *origin, ctx.header("Access-Control-Request-Headers"));
    return MiddlewareResult::respond(std::move(reply));
  }
  // Another origin's page gets the response without the headers that would
  // let its browser read it.
  if (allowed) {
    append_cors_response_headers(cors, *origin, ctx.response_headers);
  } else if (varies) {
    ctx.response_headers.emplace_back("Vary", "Origin");
  }
  return MiddlewareResult::next();
}

}  // namespace sluice
