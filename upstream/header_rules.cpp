#include "upstream/header_rules.hpp"

#include <algorithm>
#include <array>
#include <span>
#include <utility>

#include "common/ascii.hpp"

namespace sluice {
namespace {

struct VarName {
  std::string_view name;
  HeaderTemplate::Var var;
};

constexpr std::array<VarName, 4> kVars = {{
    {"client_ip", HeaderTemplate::Var::kClientIp},
    {"request_id", HeaderTemplate::Var::kRequestId},
    {"route", HeaderTemplate::Var::kRoute},
    {"scheme", HeaderTemplate::Var::kScheme},
}};

// Tab is the one control character a field value may hold.
bool is_control(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && c != '\t') || u == 0x7f;
}

std::string_view value_of(HeaderTemplate::Var var, const HeaderVars& vars) {
  switch (var) {
    case HeaderTemplate::Var::kClientIp:
      return vars.client_ip;
    case HeaderTemplate::Var::kRequestId:
      return vars.request_id;
    case HeaderTemplate::Var::kRoute:
      return vars.route;
    case HeaderTemplate::Var::kScheme:
      return vars.scheme;
    case HeaderTemplate::Var::kNone:
      break;
  }
  return {};
}

// Names compared case-insensitively: exact ones, and prefixes ending in "-".
bool matches_any(std::string_view name, std::span<const std::string_view> exact,
                 std::span<const std::string_view> prefixes) {
  const auto same = [&](std::string_view e) { return ascii::iequals(name, e); };
  const auto starts = [&](std::string_view p) {
    return name.size() >= p.size() && ascii::iequals(name.substr(0, p.size()), p);
  };
  return std::any_of(exact.begin(), exact.end(), same) ||
         std::any_of(prefixes.begin(), prefixes.end(), starts);
}

// Both directions: Sluice frames each message itself, strips hop-by-hop
// headers and writes X-Request-Id.
constexpr std::string_view kBothSides[] = {
    "Content-Length", "Transfer-Encoding", "Connection",  "Upgrade", "TE",
    "Trailer",        "Keep-Alive",        "X-Request-Id"};

constexpr std::string_view kRequestOwned[] = {
    "Host", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Via", "Expect"};
constexpr std::string_view kResponseOwned[] = {"RateLimit", "RateLimit-Policy", "Retry-After"};
constexpr std::string_view kProxyPrefix[] = {"Proxy-"};
constexpr std::string_view kResponsePrefixes[] = {"Proxy-", "X-RateLimit-"};

}  // namespace

std::string HeaderTemplate::parse(std::string_view text) {
  pieces_.clear();
  if (std::any_of(text.begin(), text.end(), is_control)) {
    return "a header value must not contain CR, LF, NUL or other control characters";
  }
  std::size_t literal_start = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '$' || i + 1 == text.size() || (text[i + 1] != '$' && text[i + 1] != '{')) {
      ++i;
      continue;
    }
    add_literal(text.substr(literal_start, i - literal_start));
    if (text[i + 1] == '$') {
      add_literal("$");
      i += 2;
    } else {
      const auto close = text.find('}', i + 2);
      if (close == std::string_view::npos) {
        return "unterminated \"${\" (write \"$$\" for a literal \"$\")";
      }
      const auto name = text.substr(i + 2, close - i - 2);
      const auto known = std::find_if(kVars.begin(), kVars.end(),
                                      [&](const VarName& v) { return v.name == name; });
      if (known == kVars.end()) {
        return "unknown variable \"${" + std::string(name) +
               "}\" (known: ${client_ip}, ${request_id}, ${route}, ${scheme}; write \"$$\" for a "
               "literal \"$\")";
      }
      pieces_.push_back(Piece{known->var, {}});
      i = close + 1;
    }
    literal_start = i;
  }
  add_literal(text.substr(literal_start));
  return {};
}

void HeaderTemplate::add_literal(std::string_view text) {
  if (text.empty()) return;
  if (!pieces_.empty() && pieces_.back().var == Var::kNone) {
    pieces_.back().literal.append(text);
  } else {
    pieces_.push_back(Piece{Var::kNone, std::string(text)});
  }
}

void HeaderTemplate::append_to(std::string& out, const HeaderVars& vars) const {
  for (const auto& piece : pieces_) {
    out.append(piece.var == Var::kNone ? std::string_view{piece.literal}
                                       : value_of(piece.var, vars));
  }
}

bool HeaderTemplate::uses(Var var) const {
  return std::any_of(pieces_.begin(), pieces_.end(), [var](const Piece& p) { return p.var == var; });
}

void HeaderRules::add_set(std::string name, HeaderTemplate value) {
  uses_client_ip_ = uses_client_ip_ || value.uses(HeaderTemplate::Var::kClientIp);
  dropped_.push_back(name);
  set_.push_back(Set{std::move(name), std::move(value)});
}

void HeaderRules::add_remove(std::string name) {
  dropped_.push_back(std::move(name));
}

bool HeaderRules::drops(std::string_view name) const {
  return std::any_of(dropped_.begin(), dropped_.end(),
                     [&](const std::string& d) { return ascii::iequals(name, d); });
}

void HeaderRules::append_set(std::string& out, const HeaderVars& vars) const {
  for (const auto& s : set_) {
    out.append(s.name).append(": ");
    s.value.append_to(out, vars);
    out.append("\r\n");
  }
}

bool is_protected_request_header(std::string_view name) {
  return matches_any(name, kBothSides, kProxyPrefix) || matches_any(name, kRequestOwned, {});
}

bool is_protected_response_header(std::string_view name) {
  return matches_any(name, kBothSides, kResponsePrefixes) || matches_any(name, kResponseOwned, {});
}

}  // namespace sluice
