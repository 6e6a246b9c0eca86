// Header rules: the headers an operator sets or removes on the request sent
// upstream or on the response relayed to the client. A rule list is compiled
// once when the configuration loads (value templates parsed into literal and
// variable pieces) and then only read, from any worker, without locks; using
// it on a request never parses anything. Pure code: no I/O, no executor.
//
// The proxy applies a list after writing its own headers, and the names it
// owns (forwarding, framing, request id, rate-limit headers) are refused at
// load, so a rule can never remove or change a header Sluice sets.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// The values a template may use, for one request.
struct HeaderVars {
  std::string_view client_ip;   // the client IP Sluice decided on
  std::string_view request_id;  // kept or generated
  std::string_view route;       // the route's name
  std::string_view scheme;      // "http" or "https"
};

// A header value with variables: "${client_ip}", "${request_id}", "${route}",
// "${scheme}"; "$$" is a literal "$", any other "$" is literal too.
class HeaderTemplate {
 public:
  enum class Var : std::uint8_t { kNone, kClientIp, kRequestId, kRoute, kScheme };
  struct Piece {
    Var var = Var::kNone;  // kNone: `literal`
    std::string literal;
  };

  // Parses `text`; returns the error (empty when it parsed). An unknown
  // variable, an unterminated "${" and CR, LF, NUL or another control
  // character (tab apart) are errors.
  std::string parse(std::string_view text);

  // Appends the value for `vars`.
  void append_to(std::string& out, const HeaderVars& vars) const;

  const std::vector<Piece>& pieces() const { return pieces_; }
  bool uses(Var var) const;

 private:
  void add_literal(std::string_view text);

  std::vector<Piece> pieces_;
};

// One direction's rules: names whose every line is replaced by one line
// (set) or deleted (remove). Names compare case-insensitively.
class HeaderRules {
 public:
  struct Set {
    std::string name;  // as configured: the spelling sent
    HeaderTemplate value;
  };

  void add_set(std::string name, HeaderTemplate value);
  void add_remove(std::string name);

  bool empty() const { return dropped_.empty(); }
  // True when incoming lines named `name` are not passed on (set or removed).
  bool drops(std::string_view name) const;
  // Appends the set headers, "Name: value\r\n" each, in configured order.
  void append_set(std::string& out, const HeaderVars& vars) const;

  const std::vector<Set>& sets() const { return set_; }
  // Whether some set value names ${client_ip} (its text is made only then).
  bool uses_client_ip() const { return uses_client_ip_; }

 private:
  std::vector<Set> set_;
  bool uses_client_ip_ = false;
  std::vector<std::string> dropped_;  // the names of set_ and of the removals
};

// Whether a rule may not name `name`. The request side protects what the
// proxy writes or frames itself (forwarding headers, Via, X-Request-Id, Host,
// framing, hop-by-hop headers, Expect, Proxy-*); the response side the framing
// and hop-by-hop headers, X-Request-Id and the rate-limit headers
// (X-RateLimit-*, RateLimit, RateLimit-Policy, Retry-After).
bool is_protected_request_header(std::string_view name);
bool is_protected_response_header(std::string_view name);

}  // namespace sluice
