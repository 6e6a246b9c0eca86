// routes[]: request_headers and response_headers, the headers a route sets or
// removes on the request sent upstream and on the response relayed back.
// Values are templates with their own variables (${client_ip}, ...), so they
// are read as written, without environment expansion, and parsed here once.
#include <unordered_map>

#include "common/ascii.hpp"
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"

namespace sluice::config {
namespace {

// One direction of one route: the names already used (lower case -> line),
// and the checks a name must pass.
class RuleReader {
 public:
  RuleReader(YamlReader& r, const RouteConfig& route, bool request)
      : r_(r), route_(route), request_(request) {}

  // Whether `name`, read at `f`, may be named by a rule; reports why not.
  bool check_name(const Field& f, const std::string& name) {
    if (!is_token(name)) {
      r_.error(f, "invalid header name " + shown(name));
      return false;
    }
    if (request_ ? is_protected_request_header(name) : is_protected_response_header(name)) {
      r_.error(f, shown(name) + " is a header Sluice sets or frames itself: a rule cannot set " +
                      "or remove it");
      return false;
    }
    if (request_ && ascii::iequals(name, route_.cost_header)) {
      r_.error(f, shown(name) + " is the route's cost_header, which is never forwarded");
      return false;
    }
    if (request_ && ascii::iequals(name, route_.cost_from_response.header)) {
      r_.error(f, shown(name) + " is the route's cost_from_response header, which is never " +
                      "forwarded");
      return false;
    }
    std::string lower = name;
    ascii::to_lower_in_place(lower);
    const auto [it, inserted] = first_line_.emplace(std::move(lower), f.line);
    if (!inserted) {
      r_.error(f, "header " + shown(name) + " is named twice (first at line " +
                      std::to_string(it->second) + ")");
      return false;
    }
    return true;
  }

  void read_set(const Field& f, HeaderRules& rules) {
    const auto m = r_.named_mapping(f);
    if (!m) return;
    for (const auto& e : m->entries) {
      if (!check_name(e.value, e.key)) continue;
      // As written: "${...}" here names a template variable, not the environment.
      if (!e.value.node.IsScalar()) {
        r_.error(e.value, "expected a string" + YamlReader::got_kind(e.value));
        continue;
      }
      HeaderTemplate value;
      if (const auto error = value.parse(e.value.node.Scalar()); !error.empty()) {
        r_.error(e.value, error);
        continue;
      }
      rules.add_set(e.key, std::move(value));
    }
  }

  void read_remove(const Field& f, HeaderRules& rules) {
    const auto items = r_.list(f);
    if (!items) return;
    for (const auto& item : *items) {
      auto name = r_.string(item);
      if (name && check_name(item, *name)) rules.add_remove(std::move(*name));
    }
  }

 private:
  YamlReader& r_;
  const RouteConfig& route_;
  const bool request_;
  std::unordered_map<std::string, int> first_line_;
};

void read_rules(YamlReader& r, const Field& f, const MappingKeys& keys, const RouteConfig& route,
                bool request, HeaderRules& rules) {
  const auto m = r.mapping(f, keys.keys);
  if (!m) return;
  RuleReader reader(r, route, request);
  // In file order, so that a name given twice is reported where it comes second.
  for (const auto& e : m->entries) {
    if (e.key == "set") reader.read_set(e.value, rules);
    if (e.key == "remove") reader.read_remove(e.value, rules);
  }
}

}  // namespace

void read_route_headers(YamlReader& r, const Mapping& m, RouteConfig& route) {
  if (auto* v = m.get("request_headers")) {
    read_rules(r, *v, kRequestHeadersKeys, route, true, route.request_headers);
  }
  if (auto* v = m.get("response_headers")) {
    read_rules(r, *v, kResponseHeadersKeys, route, false, route.response_headers);
  }
}

}  // namespace sluice::config
