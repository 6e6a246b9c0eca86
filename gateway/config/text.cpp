#include "gateway/config/text.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "common/ascii.hpp"
#include "common/hex.hpp"

namespace sluice::config {

using ascii::is_alpha;
using ascii::is_digit;

std::string shown(std::string_view s) {
  std::string out = "\"";
  const bool cut = s.size() > kMaxShownBytes;
  if (cut) s = s.substr(0, kMaxShownBytes);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      hex::append_byte(out, u);
    } else {
      out += c;
    }
  }
  out += cut ? "...\"" : "\"";
  return out;
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool is_token(std::string_view s) {
  constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return is_digit(c) || is_alpha(c) || kSpecials.find(c) != std::string_view::npos;
  });
}

bool is_valid_name(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return is_digit(c) || is_alpha(c) || c == '_' || c == '-' || c == '.';
  });
}

std::optional<std::string> api_key_problem(std::string_view key) {
  if (key.empty()) return "must not be empty";
  if (key.size() > kMaxApiKeyBytes) {
    return "longer than " + std::to_string(kMaxApiKeyBytes) + " bytes";
  }
  if (std::any_of(key.begin(), key.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; })) {
    return "must not contain spaces or control characters";
  }
  return std::nullopt;
}

std::optional<std::string> consumer_id_problem(std::string_view id) {
  if (id.empty()) return "must not be empty";
  if (id.size() > kMaxConsumerIdBytes) {
    return "longer than " + std::to_string(kMaxConsumerIdBytes) + " bytes";
  }
  const bool allowed = std::all_of(id.begin(), id.end(), [](char c) {
    return is_digit(c) || is_alpha(c) || std::string_view("-_.@:+~").find(c) != std::string_view::npos;
  });
  if (!allowed) return "may hold only letters, digits and - _ . @ : + ~";
  if (id.find("..") != std::string_view::npos) return "must not contain \"..\"";
  return std::nullopt;
}

bool is_host_name(std::string_view s) {
  return !s.empty() && s.size() <= 253 && std::all_of(s.begin(), s.end(), [](char c) {
    return is_digit(c) || is_alpha(c) || c == '-' || c == '.' || c == '_';
  });
}

std::optional<std::uint16_t> parse_port(std::string_view s, unsigned min) {
  if (!ascii::all_digits(s) || s.size() > 5) return std::nullopt;
  unsigned v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  if (v < min || v > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(v);
}

std::variant<HostPort, std::string> parse_address(std::string_view text, bool listener) {
  const std::string expected = "expected host:port, got " + shown(text);
  HostPort out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return expected;
    }
    const auto host = text.substr(1, close - 1);
    if (!parse_ip_literal(host, IpFamily::kV6)) return "invalid IPv6 address " + shown(host);
    out.host = std::string(host);
    port_text = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return expected;
    const auto host = text.substr(0, colon);
    if (host.find(':') != std::string_view::npos) {
      return "IPv6 addresses need brackets, e.g. \"[::1]:8080\", got " + shown(text);
    }
    const bool looks_v4 =
        std::all_of(host.begin(), host.end(), [](char c) { return is_digit(c) || c == '.'; });
    if (looks_v4 && !parse_ip_literal(host, IpFamily::kV4)) {
      return "invalid IPv4 address " + shown(host);
    }
    if (listener && !looks_v4) {
      return "host must be an IP address, not a name, got " + shown(text);
    }
    if (!is_host_name(host)) return "invalid host " + shown(host);
    out.host = std::string(host);
    port_text = text.substr(colon + 1);
  }
  const unsigned min_port = listener ? 0 : 1;
  const auto port = parse_port(port_text, min_port);
  if (!port) {
    return "port must be between " + std::to_string(min_port) + " and 65535, got " + shown(text);
  }
  out.port = *port;
  return out;
}

}  // namespace sluice::config
