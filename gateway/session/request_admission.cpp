#include "gateway/session/request_admission.hpp"

#include <vector>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

#include "common/spares.hpp"
#include "common/target_parts.hpp"
#include "gateway/session/local_reply.hpp"
#include "gateway/router.hpp"
#include "gateway/session/trace_context.hpp"
#include "upstream/field_scan.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

// The request as route matchers read it: its query as received and its
// header lines.
class RequestMatchInput final : public MatchInput {
 public:
  explicit RequestMatchInput(const ClientRequest& req) : req_(req) {}
  std::string_view query() const override { return split_target(req_.target()).query; }
  void each_header(std::string_view name,
                   const std::function<void(std::string_view)>& fn) const override {
    for_each_field(req_, FieldName(name), fn);
  }

 private:
  const ClientRequest& req_;
};

// Framing and Host rules: the reason a head is refused with a 400 (or 501), or
// an empty view.
struct Refusal {
  unsigned status = 0;
  std::string_view message;
};

Refusal check_transfer_coding(const ClientRequest& req) {
  const std::size_t codings = count_field(req, http::field::transfer_encoding);
  if (codings > 1) return {400, "more than one Transfer-Encoding header"};
  const std::string_view coding_list = field_value(req, http::field::transfer_encoding);
  if (codings && !beast::iequals(coding_list, "chunked")) {
    // chunked twice, or not last, is faulty framing; anything else (gzip,
    // chunked) is a coding Sluice does not implement.
    std::size_t chunked = 0;
    bool chunked_last = false;
    for (const auto& coding : http::token_list{coding_list}) {
      chunked_last = beast::iequals(coding, "chunked");
      chunked += chunked_last ? 1 : 0;
    }
    if (chunked > 1 || (chunked == 1 && !chunked_last)) {
      return {400, "chunked must be the only transfer coding"};
    }
    return {501, "transfer coding not supported"};
  }
  // HTTP/1.0 has no transfer codings: such a message's framing is faulty.
  if (req.version() == 10 && codings) {
    return {400, "Transfer-Encoding in an HTTP/1.0 request"};
  }
  return {};
}

Refusal check_framing_and_host(const ClientRequest& req) {
  // Both framings at once is request smuggling material: refuse it.
  if (count_field(req, http::field::content_length) &&
      count_field(req, http::field::transfer_encoding)) {
    return {400, "both Content-Length and Transfer-Encoding"};
  }
  const std::size_t hosts = count_field(req, http::field::host);
  if (req.version() == 11 && hosts == 0) return {400, "missing Host header"};
  if (hosts > 1) return {400, "more than one Host header"};
  if (const auto refusal = check_transfer_coding(req); refusal.status) return refusal;
  // The asterisk form names the server itself, for OPTIONS only.
  if (req.target() == "*" && req.method() != http::verb::options) {
    return {400, "\"*\" target with a method other than OPTIONS"};
  }
  if (hosts) {
    if (const auto error = check_host(field_value(req, http::field::host)); !error.empty()) {
      return {400, error};
    }
  }
  return {};
}

// The target as forwarded: absolute-form made origin-form (its authority
// replaces Host, so routing and upstream see the same host), then normalized.
// The message of the refusal, or an empty view.
std::string_view rewrite_target(ClientRequest& req, RequestInfo& info) {
  if (!req.target().starts_with("/") && req.target() != "*") {
    auto absolute = split_absolute_form(req.target());
    if (!absolute.error.empty()) return absolute.error;
    info.original_target.assign(req.target());  // the access log shows what the client sent
    req.set(http::field::host, absolute.authority);
    req.target(absolute.target);
  }
  if (const auto error = normalize_target(req.target(), info.target); !error.empty()) return error;
  if (info.target.target != req.target()) {
    if (info.original_target.empty()) info.original_target.assign(req.target());
    req.target(info.target.target);
  }
  return {};
}

LocalReply refuse(unsigned status, std::string_view message, RequestInfo& info) {
  generate_request_id(info.request_id);
  auto reply = make_local_reply(status, message, info.request_id);
  reply.close_connection = true;
  return reply;
}

// A valid traceparent stays (its tracestate too); anything else is dropped
// (with its tracestate) and a new one started, which the upstream request
// carries (ForwardedInfo::traceparent). `trace_id` gets the trace's id. With
// tracing on, a recorded request's traceparent goes upstream with Sluice's
// span as the parent (tracestate kept).
void keep_or_start_trace(HttpFields& head, const Config& config, RequestInfo& info) {
  using namespace traceparent_v00;
  const TracingConfig& tracing = config.tracing;
  info.recorded = false;
  const std::size_t lines = head.count("traceparent");
  if (lines == 1) {
    const std::string_view value = head["traceparent"];
    if (auto id = traceparent_trace_id(value)) {
      info.trace_id.assign(*id);
      info.traceparent.clear();
      if (!tracing.enabled()) return;
      const char low = value[kFlags + 1];  // the flags' last hex digit: its low bit is "sampled"
      const int low_bits = low <= '9' ? low - '0' : low - 'a' + 10;
      const bool parent_sampled = (low_bits & 1) != 0;
      info.recorded = tracing.parent_based ? parent_sampled
                                           : ratio_sampled(info.trace_id, tracing.sampling_ratio);
      if (!info.recorded) return;
      info.parent_span_id.assign(value.substr(kParentId, kParentIdSize));
      new_span_id(info.span_id);
      // Sluice's span as the parent; the flags kept, with "sampled" set.
      static constexpr char kHex[] = "0123456789abcdef";
      info.traceparent.assign("00-");
      info.traceparent.append(info.trace_id).append("-").append(info.span_id).append("-");
      info.traceparent += value[kFlags];
      info.traceparent += kHex[low_bits | 1];
      head.erase("traceparent");
      return;
    }
  }
  if (lines > 0) {
    head.erase("traceparent");
    head.erase("tracestate");
  } else if (head.count("tracestate") > 0) {
    head.erase("tracestate");
  }
  if (!tracing.enabled()) {
    new_traceparent(info.traceparent, config.log.trace_sampled);
    info.trace_id.assign(info.traceparent, kTraceId, kTraceIdSize);
    return;
  }
  new_traceparent(info.traceparent, false);
  info.trace_id.assign(info.traceparent, kTraceId, kTraceIdSize);
  info.recorded = ratio_sampled(info.trace_id, tracing.sampling_ratio);
  if (!info.recorded) return;
  info.parent_span_id.clear();
  info.span_id.assign(info.traceparent, kParentId, kParentIdSize);
  info.traceparent.replace(kFlags, 2, "01");
}

}  // namespace

RequestInfo::RequestInfo()
    : request_id(Spares<std::string>::take()),
      trace_id(Spares<std::string>::take()),
      traceparent(Spares<std::string>::take()) {
  target.target = Spares<std::string>::take();
  target.route_path = Spares<std::string>::take();
}

RequestInfo::~RequestInfo() {
  for (std::string* s : {&target.target, &target.route_path, &request_id, &trace_id,
                         &traceparent}) {
    Spares<std::string>::give(std::move(*s));
  }
}

std::optional<LocalReply> admit_request(ClientRequest& req, BodyFacts body, const IpAddress& peer,
                                        bool over_tls, const Config& config, RequestInfo& info) {
  info.route = nullptr;
  info.original_target.clear();
  info.keep_alive = false;
  info.websocket = false;
  keep_or_start_trace(req.base(), config, info);
  if (const auto refusal = check_framing_and_host(req); refusal.status) {
    return refuse(refusal.status, refusal.message, info);
  }
  if (const auto error = rewrite_target(req, info); !error.empty()) {
    return refuse(400, error, info);
  }
  info.keep_alive = req.keep_alive();
  info.body = body;
  info.websocket = req.version() == 11 && req.method() == http::verb::get && body.done &&
                   asks_websocket_upgrade(req.base());
  // Hop-by-hop headers (and the names Connection lists) go before anything
  // reads the head, so a client cannot hide X-Request-Id and the like.
  strip_hop_by_hop(req.base());
  // Names with "_" reach CGI-style servers as the "-" names they resemble.
  switch (config.server.headers_with_underscores) {
    case ServerConfig::Underscores::kAllow:
      break;
    case ServerConfig::Underscores::kDrop:
      erase_underscore_fields(req.base());
      break;
    case ServerConfig::Underscores::kReject:
      if (erase_underscore_fields(req.base()) > 0) {
        return refuse(400, "header name with an underscore", info);
      }
      break;
  }
  static const FieldName kRequestId("X-Request-Id");
  auto incoming_id = field_value(req, kRequestId);
  if (is_acceptable_request_id(incoming_id)) {
    info.request_id.assign(incoming_id);
  } else {
    generate_request_id(info.request_id);
  }

  // Client IP: the peer, or the right-most untrusted X-Forwarded-For entry.
  std::vector<std::string_view> xff;
  static const FieldName kForwardedFor("X-Forwarded-For");
  for_each_field(req, kForwardedFor, [&](std::string_view value) { xff.push_back(value); });
  info.client_ip = resolve_client_ip(peer, xff, config.server.trusted_proxies);
  // The scheme a trusted proxy saw is kept; anyone else's is replaced.
  info.forwarded_proto = "http";
  static const FieldName kForwardedProto("X-Forwarded-Proto");
  if (over_tls || (is_trusted(peer, config.server.trusted_proxies) &&
                   beast::iequals(field_value(req, kForwardedProto), "https"))) {
    info.forwarded_proto = "https";
  }

  const RequestMatchInput match_input(req);
  auto decision = select_route(config, req.method_string(), info.target.route_path,
                               field_value(req, http::field::host), &match_input);
  if (decision.kind == RouteDecision::Kind::kMethodNotAllowed && req.method() == http::verb::options) {
    // A CORS preflight asks for the method it names: a route with cors that
    // takes that method answers it, even if OPTIONS is not among its methods.
    static const FieldName kRequestMethod("Access-Control-Request-Method");
    const auto asked = field_value(req, kRequestMethod);
    if (!asked.empty() && req.find(http::field::origin) != req.end()) {
      auto preflight = select_route(config, asked, info.target.route_path,
                                    field_value(req, http::field::host), &match_input);
      if (preflight.kind == RouteDecision::Kind::kMatched && preflight.route->cors.enabled) {
        decision = preflight;
      }
    }
  }
  if (decision.kind == RouteDecision::Kind::kMatched) {
    info.route = decision.route;
    return std::nullopt;
  }
  // A request whose body is not read yet cannot be followed by another.
  LocalReply reply = decision.kind == RouteDecision::Kind::kNotFound
                         ? make_local_reply(404, "no route matches", info.request_id)
                         : make_local_reply(405, "method not allowed", info.request_id);
  if (decision.kind == RouteDecision::Kind::kMethodNotAllowed) {
    reply.headers.emplace_back("Allow", decision.allow);
  }
  reply.close_connection = !body.done;
  return reply;
}

}  // namespace sluice
