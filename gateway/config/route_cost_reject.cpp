// routes[]: the keys of a route that shape one request's decision: the cost
// taken from a request header (cost_header, max_cost) and the reply to a
// denied request (reject). max_cost is checked against the route's limits by
// the second pass.
#include <algorithm>

#include "common/ascii.hpp"
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/usage_expression.hpp"

namespace sluice::config {
namespace {

constexpr std::int64_t kMaxCost = 1'000'000'000;
constexpr std::size_t kMaxRejectBodyBytes = 64 * 1024;
constexpr std::size_t kMaxContentTypeBytes = 256;
constexpr std::int64_t kMaxInspectBytes = std::int64_t{64} << 20;

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

// "200-299", "404" or 404: a status or an inclusive range of them.
std::optional<std::pair<unsigned, unsigned>> read_status_range(YamlReader& r, const Field& f) {
  const auto text = r.string(f);
  if (!text) return std::nullopt;
  const std::string_view t = *text;
  const auto dash = t.find('-');
  const auto number = [](std::string_view s) -> std::optional<unsigned> {
    if (s.size() != 3 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    const unsigned n = static_cast<unsigned>((s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0'));
    if (n < 100 || n > 599) return std::nullopt;
    return n;
  };
  const auto lo = number(t.substr(0, dash));
  const auto hi = dash == std::string_view::npos ? lo : number(t.substr(dash + 1));
  if (!lo || !hi || *lo > *hi) {
    r.error(f, "expected a status (100-599) or a range \"LOW-HIGH\", got " + shown(t));
    return std::nullopt;
  }
  return std::pair{*lo, *hi};
}

// One usage expression, or a list of alternatives (the first found wins).
void read_body_usage(YamlReader& r, const Field& f, CostFromResponse& out) {
  std::vector<Field> items;
  if (f.node.IsSequence()) {
    auto list = r.list(f);
    if (!list) return;
    if (list->empty()) r.error(f, "must list at least one usage expression");
    items = std::move(*list);
  } else {
    items.push_back(f);
  }
  usage::UsageExpression all;
  for (const Field& item : items) {
    const auto text = r.nonempty_string(item);
    if (!text) return;
    std::string why;
    auto expression = usage::parse_usage_expression(*text, why);
    if (!expression) return r.error(item, why);
    if (!usage::add_alternative(all, std::move(*expression))) {
      return r.error(f, "at most " + std::to_string(usage::kMaxTerms) +
                            " paths in all the alternatives together");
    }
    out.body_text += (out.body_text.empty() ? "" : " | ") + *text;
  }
  if (!all.terms.empty()) out.body = std::move(all);
}

void read_cost_from_response(YamlReader& r, const Field& f, CostFromResponse& out) {
  const auto m = r.mapping(f, kCostFromResponseKeys.keys);
  if (!m) return;
  const Field* header = m->get("header");
  const Field* body = m->get("body");
  if (!header && !body) r.error(f, "needs a header, a body, or both");
  if (header) {
    if (auto name = r.nonempty_string(*header)) {
      if (!is_token(*name)) {
        r.error(*header, "invalid header name " + shown(*name));
      } else {
        out.header = *name;
      }
    }
  }
  if (body) read_body_usage(r, *body, out);
  if (const Field* max = m->get("max_inspect_bytes")) {
    if (!body) {
      r.error(*max, "only valid with body");
    } else if (auto n = r.integer(*max, 1024, kMaxInspectBytes)) {
      out.max_inspect_bytes = static_cast<std::size_t>(*n);
    }
  }
  if (const Field* statuses = m->get("statuses")) {
    if (auto items = r.list(*statuses)) {
      if (items->empty()) r.error(*statuses, "must list at least one status or range");
      for (const auto& item : *items) {
        if (auto range = read_status_range(r, item)) out.statuses.push_back(*range);
      }
    }
  }
  if (const Field* debt = m->get("max_debt")) {
    if (auto n = r.integer(*debt, 0, kMaxCost)) out.max_debt = static_cast<double>(*n);
  }
}

}  // namespace

std::optional<Field> read_body_cost(YamlReader& r, const Field& f, RouteConfig& route) {
  const auto m = r.mapping(f, kRouteCostKeys.keys);
  if (!m) return std::nullopt;
  RequestBodyCost body;
  if (const Field* from = m->get("from_body")) {
    std::vector<Field> items;
    if (from->node.IsSequence()) {
      if (auto list = r.list(*from)) items = std::move(*list);
      if (items.empty()) r.error(*from, "must list at least one member path");
    } else {
      items.push_back(*from);
    }
    for (const Field& item : items) {
      const auto text = r.nonempty_string(item);
      if (!text) continue;
      std::vector<std::string> path;
      std::string why;
      if (!usage::parse_member_path(*text, path, why)) {
        r.error(item, why);
      } else {
        body.paths.push_back(*text);
      }
    }
  }
  if (const Field* v = m->get("add_prompt_estimate")) {
    if (auto b = r.boolean(*v)) body.add_prompt_estimate = *b;
  }
  if (const Field* v = m->get("bytes_per_token")) {
    if (auto n = r.positive_number(*v)) body.bytes_per_token = *n;
  }
  if (!m->get("from_body") && !body.add_prompt_estimate) {
    r.error(f, "needs from_body or add_prompt_estimate: true (else write the cost as a number)");
  }
  route.body.cost = std::move(body);
  const Field* fallback = m->get("default");
  if (!fallback) return std::nullopt;  // the route's cost stays 1
  const auto n = r.positive_number(*fallback);
  if (!n) return std::nullopt;
  route.cost = *n;
  return *fallback;
}

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
  if (auto* v = m.get("cost_from_response")) read_cost_from_response(r, *v, route.cost_from_response);
}

}  // namespace sluice::config
