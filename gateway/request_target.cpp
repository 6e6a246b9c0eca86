#include "gateway/request_target.hpp"

#include <algorithm>
#include <cstring>

#include "gateway/client_ip.hpp"
#include "common/ascii.hpp"
#include "common/hex.hpp"
#include "common/target_parts.hpp"

namespace sluice {
namespace {

using ascii::is_alpha;
using ascii::is_digit;

bool is_unreserved(unsigned char c) {
  return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

bool is_sub_delim(unsigned char c) {
  return c != '\0' && std::strchr("!$&'()*+,;=", c) != nullptr;
}

// A character a path may hold as it is (besides '/' and escapes).
bool is_path_char(unsigned char c) {
  return is_unreserved(c) || is_sub_delim(c) || c == ':' || c == '@';
}

bool is_control(unsigned char c) {
  return c <= 0x20 || c == 0x7f;
}

void append_escape(std::string& out, unsigned char c) {
  out += '%';
  hex::append_byte_upper(out, c);
}

// Walks a normalized path as its route path: ';' starts parameters that run to
// the next '/', and a '/' right after another emitted '/' is dropped. Calls
// emit(index) for every character of `path` that is part of the route path;
// stops early when emit returns false.
template <class Emit>
void walk_route_path(std::string_view path, Emit&& emit) {
  bool in_parameters = false;
  char last = '\0';
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '/') {
      in_parameters = false;
      if (last == '/') continue;
    } else if (in_parameters) {
      continue;
    } else if (c == ';') {
      in_parameters = true;
      continue;
    }
    last = c;
    if (!emit(i)) return;
  }
}

void append_route_path(std::string_view path, std::string& out) {
  walk_route_path(path, [&](std::size_t i) {
    out += path[i];
    return true;
  });
}

// True when a segment of a route path is "." or "..".
bool has_dot_segment(std::string_view route_path) {
  std::size_t start = 0;
  while (start <= route_path.size()) {
    auto end = route_path.find('/', start);
    if (end == std::string_view::npos) end = route_path.size();
    const auto segment = route_path.substr(start, end - start);
    if (segment == "." || segment == "..") return true;
    start = end + 1;
  }
  return false;
}

// "[v6]" or "[vX.Y]": the brackets included.
bool is_ip_literal(std::string_view s) {
  if (s.size() < 3 || s.front() != '[' || s.back() != ']') return false;
  const auto inner = s.substr(1, s.size() - 2);
  if (inner.front() == 'v' || inner.front() == 'V') {
    // IPvFuture: "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
    const auto dot = inner.find('.');
    if (dot == std::string_view::npos || dot < 2 || dot + 1 == inner.size()) return false;
    for (std::size_t i = 1; i < dot; ++i) {
      if (hex::digit_value(inner[i]) < 0) return false;
    }
    for (std::size_t i = dot + 1; i < inner.size(); ++i) {
      const auto c = static_cast<unsigned char>(inner[i]);
      if (!is_unreserved(c) && !is_sub_delim(c) && c != ':') return false;
    }
    return true;
  }
  return parse_ip_literal(inner, IpFamily::kV6).has_value();
}

bool is_reg_name(std::string_view s) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '%') {
      if (hex::pair_value(s.substr(i + 1)) < 0) return false;
      i += 2;
    } else if (!is_unreserved(c) && !is_sub_delim(c)) {
      return false;
    }
  }
  return true;
}

bool is_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return false;
  unsigned value = 0;
  for (const char c : s) {
    if (!is_digit(static_cast<unsigned char>(c))) return false;
    value = value * 10 + unsigned(c - '0');
  }
  return value <= 65535;
}

}  // namespace

std::string_view normalize_target(std::string_view target, NormalizedTarget& out) {
  out.target.clear();
  out.route_path.clear();
  if (target == "*") {
    out.target = "*";
    out.route_path = "*";
    return {};
  }
  if (target.empty() || target.front() != '/') return "request target is not origin-form";
  for (const char c : target) {
    if (c == '#') return "fragment in request target";
    if (is_control(static_cast<unsigned char>(c))) return "control character in request target";
  }
  const auto path = split_target(target).path;
  // The usual path needs no change: no escape, backslash, "//" or byte to escape.
  const bool plain = std::ranges::adjacent_find(path, [](char a, char b) {
                       return a == '/' && b == '/';
                     }) == path.end() &&
                     std::ranges::all_of(path, [](char ch) {
                       return ch == '/' || is_path_char(static_cast<unsigned char>(ch));
                     });
  if (plain) out.target.assign(path);
  for (std::size_t i = 0; !plain && i < path.size(); ++i) {
    auto c = static_cast<unsigned char>(path[i]);
    if (c == '%') {
      const int value = hex::pair_value(path.substr(i + 1));
      if (value < 0) return "malformed percent-escape in path";
      i += 2;
      c = static_cast<unsigned char>(value);
      if (c == '/' || c == '\\' || c == '\0') return "encoded '/', '\\' or NUL in path";
      if (!is_unreserved(c)) {
        append_escape(out.target, c);
        continue;
      }
    } else if (c == '\\') {
      return "backslash in path";
    } else if (c == '/') {
      if (!out.target.empty() && out.target.back() == '/') continue;
    } else if (!is_path_char(c)) {
      // Bytes a path may not hold raw (non-ASCII, '"', '<', '[', ...) are
      // escaped, so that each path has one spelling.
      append_escape(out.target, c);
      continue;
    }
    out.target += static_cast<char>(c);
  }
  append_route_path(out.target, out.route_path);
  if (has_dot_segment(out.route_path)) return "dot segments in path";
  out.target += target.substr(path.size());  // "?query" as received, if any
  return {};
}

AbsoluteForm split_absolute_form(std::string_view target) {
  AbsoluteForm result;
  const auto colon = target.find(':');
  if (colon == std::string_view::npos) {
    result.error = "bad request target";
    return result;
  }
  const auto scheme = target.substr(0, colon);
  if (!ascii::iequals(scheme, "http") && !ascii::iequals(scheme, "https")) {
    result.error = "request target scheme is not http or https";
    return result;
  }
  auto rest = target.substr(colon + 1);
  if (!rest.starts_with("//")) {
    result.error = "request target has no authority";
    return result;
  }
  rest.remove_prefix(2);
  const auto path_start = rest.find_first_of("/?#");
  const auto authority = rest.substr(0, path_start);
  if (authority.empty()) {
    result.error = "request target has an empty authority";
    return result;
  }
  if (!check_host(authority).empty()) {
    result.error = "request target has an invalid authority";
    return result;
  }
  result.authority.assign(authority);
  if (path_start == std::string_view::npos) {
    result.target = "/";
  } else {
    if (rest[path_start] != '/') result.target = "/";
    result.target += rest.substr(path_start);
  }
  return result;
}

std::string_view check_host(std::string_view host) {
  if (host.empty()) return "empty Host";
  std::string_view name = host;
  std::string_view port;
  bool has_port = false;
  if (host.front() == '[') {
    const auto close = host.find(']');
    if (close == std::string_view::npos) return "invalid Host";
    name = host.substr(0, close + 1);
    const auto after = host.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return "invalid Host";
      has_port = true;
      port = after.substr(1);
    }
    if (!is_ip_literal(name)) return "invalid Host";
  } else {
    const auto colon = host.find(':');
    if (colon != std::string_view::npos) {
      name = host.substr(0, colon);
      port = host.substr(colon + 1);
      has_port = true;
    }
    if (!is_reg_name(name)) return "invalid Host";
  }
  if (has_port && !is_port(port)) return "invalid port in Host";
  return {};
}

std::string route_path_of(std::string_view path) {
  std::string out;
  append_route_path(path, out);
  return out;
}

std::optional<std::size_t> forwarded_prefix_length(std::string_view path,
                                                   std::string_view route_prefix) {
  if (route_prefix.empty()) return 0;
  std::size_t matched = 0;
  std::optional<std::size_t> end;
  walk_route_path(path, [&](std::size_t i) {
    if (path[i] != route_prefix[matched]) return false;
    if (++matched < route_prefix.size()) return true;
    end = i + 1;
    return false;
  });
  if (!end) return std::nullopt;
  // The parameters of the segment where the prefix ends go with it.
  if (*end < path.size() && path[*end] == ';') {
    const auto slash = path.find('/', *end);
    end = slash == std::string_view::npos ? path.size() : slash;
  }
  return end;
}

}  // namespace sluice
