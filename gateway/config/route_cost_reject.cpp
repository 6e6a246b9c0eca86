// routes[]: the keys of a route that shape one request's decision: the cost
// taken from a request header (cost_header, max_cost) and the reply to a
// denied request (reject). max_cost is checked against the route's limits by
// the second pass.
#include <algorithm>

#include "gateway/common/ascii.hpp"
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"

namespace sluice::config {
namespace {

constexpr std::int64_t kMaxCost = 1'000'000'000;
constexpr std::size_t kMaxRejectBodyBytes = 64 * 1024;
constexpr std::size_t kMaxContentTypeBytes = 256;

// Headers the proxy frames or rewrites itself: a cost header is removed
// before the request goes upstream, so it cannot be one of these.
constexpr std::string_view kProxyHeaders[] = {"Host",
                                              "Content-Length",
                                              "Transfer-Encoding",
                                              "Connection",
                                              "Expect",
                                              "Upgrade",
                                              "TE",
                                              "Trailer",
                                              "Keep-Alive",
                                              "Via",
                                              "X-Request-Id",
                                              "X-Forwarded-For",
                                              "X-Forwarded-Proto",
                                              "X-Forwarded-Host"};

void read_cost_header(YamlReader& r, const Field& v, RouteConfig& route, ReadNotes::Route& notes) {
  const auto s = r.nonempty_string(v);
  if (!s) return;
  if (!is_token(*s)) {
    r.error(v, "invalid header name " + shown(*s));
    return;
  }
  const bool reserved =
      std::any_of(std::begin(kProxyHeaders), std::end(kProxyHeaders),
                  [&](std::string_view name) { return ascii::iequals(name, *s); });
  if (reserved) {
    r.error(v, shown(*s) + " is a header the proxy sets or frames itself");
    return;
  }
  route.cost_header = *s;
  notes.cost_header = HeaderUse{v, *s};
}

// Visible ASCII and spaces only: the value becomes a response header.
bool is_header_value(std::string_view s) {
  return !s.empty() && s.size() <= kMaxContentTypeBytes &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= ' ' && c < 0x7f; });
}

void read_reject(YamlReader& r, const Field& f, RejectReply& reject) {
  const auto m = r.mapping(f, kRejectKeys.keys);
  if (!m) return;
  if (auto* v = m->get("status")) {
    if (auto n = r.integer(*v, 0, 599)) {
      if (*n < 400) {
        r.error(*v, "must be a 4xx or 5xx status, got " + std::to_string(*n));
      } else {
        reject.status = static_cast<unsigned>(*n);
      }
    }
  }
  const Field* body = m->get("body");
  if (body) {
    if (auto s = r.nonempty_string(*body)) {
      if (s->size() > kMaxRejectBodyBytes) {
        r.error(*body, "longer than " + std::to_string(kMaxRejectBodyBytes) + " bytes");
      } else {
        reject.body = *s;
        reject.content_type = "application/json";
      }
    }
  }
  if (auto* v = m->get("content_type")) {
    const auto s = r.string(*v);
    if (!s) return;
    if (!body) {
      r.error(*v, "only valid with body");
    } else if (!is_header_value(*s) || s->find('/') == std::string::npos) {
      r.error(*v, "invalid content type " + shown(*s));
    } else if (!reject.body.empty()) {
      reject.content_type = *s;
    }
  }
}

}  // namespace

void read_route_cost_and_reject(YamlReader& r, const Mapping& m, RouteConfig& route,
                                ReadNotes::Route& notes) {
  const Field* header = m.get("cost_header");
  if (header) read_cost_header(r, *header, route, notes);
  if (auto* v = m.get("max_cost")) {
    if (!header) {
      r.error(*v, "only valid with cost_header");
    } else if (auto n = r.integer(*v, 0, kMaxCost)) {
      route.max_cost = static_cast<double>(*n);
      if (*n > 0) notes.max_cost = ReadValue{*v, r.here(), {}};
    }
  }
  if (auto* v = m.get("reject")) read_reject(r, *v, route.reject);
}

}  // namespace sluice::config
