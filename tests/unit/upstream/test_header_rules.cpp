#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "upstream/header_rules.hpp"

using namespace sluice;

namespace {

using Var = HeaderTemplate::Var;

const HeaderVars kVars{"203.0.113.9", "req-1", "orders", "https"};

std::string expand(const HeaderTemplate& t, const HeaderVars& vars = kVars) {
  std::string out = "kept:";  // appended to, never replaced
  t.append_to(out, vars);
  return out.substr(5);
}

HeaderTemplate parsed(std::string_view text) {
  HeaderTemplate t;
  const auto error = t.parse(text);
  INFO(text);
  REQUIRE(error.empty());
  return t;
}

std::string parse_error(std::string_view text) {
  HeaderTemplate t;
  return t.parse(text);
}

}  // namespace

TEST_CASE("a template is parsed once into literal and variable pieces", "[header_rules]") {
  const auto t = parsed("ip=${client_ip}; id=${request_id}${route}/${scheme}");
  REQUIRE(t.pieces().size() == 7);
  CHECK(t.pieces()[0].literal == "ip=");
  CHECK(t.pieces()[1].var == Var::kClientIp);
  CHECK(t.pieces()[2].literal == "; id=");
  CHECK(t.pieces()[3].var == Var::kRequestId);
  CHECK(t.pieces()[4].var == Var::kRoute);
  CHECK(t.pieces()[5].literal == "/");
  CHECK(t.pieces()[6].var == Var::kScheme);
  CHECK(expand(t) == "ip=203.0.113.9; id=req-1orders/https");
  // The same pieces give each request its own values.
  CHECK(expand(t, {"10.0.0.1", "x", "r", "http"}) == "ip=10.0.0.1; id=xr/http");
}

TEST_CASE("template literals: \"$$\" is a dollar, other dollars are literal", "[header_rules]") {
  const auto t = parsed("$$5 costs $ and $x, $${route}$");
  REQUIRE(t.pieces().size() == 1);  // adjacent literals are one piece
  CHECK(expand(t) == "$5 costs $ and $x, ${route}$");
  CHECK(parsed("").pieces().empty());
  CHECK(expand(parsed("")) == "");
  CHECK(expand(parsed("tab\tok")) == "tab\tok");
  CHECK(expand(parsed("${route}")) == "orders");
}

TEST_CASE("template errors", "[header_rules]") {
  CHECK(parse_error("${client}") ==
        "unknown variable \"${client}\" (known: ${client_ip}, ${request_id}, ${route}, "
        "${scheme}; write \"$$\" for a literal \"$\")");
  CHECK(parse_error("${}").starts_with("unknown variable \"${}\""));
  CHECK(parse_error("${ROUTE}").starts_with("unknown variable \"${ROUTE}\""));
  CHECK(parse_error("a ${route") == "unterminated \"${\" (write \"$$\" for a literal \"$\")");
  const std::string control =
      "a header value must not contain CR, LF, NUL or other control "
      "characters";
  CHECK(parse_error("a\r\nX-Injected: 1") == control);
  CHECK(parse_error("a\nb") == control);
  CHECK(parse_error(std::string_view("a\0b", 3)) == control);
  CHECK(parse_error("a\x7f") == control);
}

TEST_CASE("header rules: which incoming lines are dropped, which lines are set", "[header_rules]") {
  HeaderRules rules;
  CHECK(rules.empty());
  rules.add_set("X-Edge", parsed("${route}"));
  rules.add_remove("Server");
  // The client IP's text is made per request only for rules that name it.
  CHECK_FALSE(rules.uses_client_ip());
  rules.add_set("X-Client", parsed("ip ${client_ip}"));
  CHECK(rules.uses_client_ip());
  CHECK_FALSE(rules.empty());
  CHECK(rules.drops("x-edge"));
  CHECK(rules.drops("SERVER"));
  CHECK(rules.drops("X-Client"));
  CHECK_FALSE(rules.drops("X-Edges"));
  CHECK_FALSE(rules.drops("Serve"));
  std::string out = "HTTP/1.1 200 OK\r\n";
  rules.append_set(out, kVars);
  CHECK(out ==
        "HTTP/1.1 200 OK\r\n"
        "X-Edge: orders\r\n"
        "X-Client: ip 203.0.113.9\r\n");
}

TEST_CASE("header rules: the names Sluice owns are protected", "[header_rules]") {
  struct Case {
    bool (*is_protected)(std::string_view);
    bool expected;
    std::vector<std::string_view> names;
  };
  const Case cases[] = {
      {is_protected_request_header,
       true,
       {"X-Forwarded-For", "x-forwarded-proto", "X-Forwarded-Host", "X-Request-Id", "Host", "Via",
        "Expect", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "TE", "Trailer",
        "Keep-Alive", "Proxy-Authorization", "proxy-connection", "Proxy-Anything"}},
      {is_protected_request_header,
       false,
       {"X-Api-Key", "Authorization", "Cookie", "X-Real-IP", "Retry-After", "X-RateLimit-Limit",
        "User-Agent", "Proxy"}},
      {is_protected_response_header,
       true,
       {"X-RateLimit-Limit", "x-ratelimit-remaining", "X-RateLimit-Anything", "RateLimit",
        "RateLimit-Policy", "Retry-After", "X-Request-Id", "Content-Length", "Transfer-Encoding",
        "Connection", "Upgrade", "Trailer", "Keep-Alive", "TE", "Proxy-Authenticate"}},
      {is_protected_response_header,
       false,
       {"Server", "Cache-Control", "Content-Type", "Set-Cookie", "X-Forwarded-For", "Via",
        "RateLimits", "X-RateLimit"}},
  };
  for (const auto& c : cases) {
    for (auto name : c.names) {
      INFO(name << (c.is_protected == is_protected_request_header ? " (request)" : " (response)"));
      CHECK(c.is_protected(name) == c.expected);
    }
  }
}
