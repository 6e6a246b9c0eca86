#include "gateway/config/redis_url.hpp"

#include <charconv>

#include "common/ascii.hpp"
#include "common/hex.hpp"
#include "gateway/config/text.hpp"

namespace sluice {
namespace {

constexpr std::uint16_t kDefaultRedisPort = 6379;

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int value = hex::pair_value(s.substr(i + 1));
    if (value < 0) return std::nullopt;
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

}  // namespace

std::string redact_redis_url(std::string_view url) {
  const auto scheme_end = url.find("://");
  const std::size_t rest_begin = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  std::string out(url.substr(0, rest_begin));
  auto rest = url.substr(rest_begin);
  // Credentials end at the last "@", even when a "/", "?" or "#" in the
  // password comes before it.
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    const auto userinfo = rest.substr(0, at);
    const auto colon = userinfo.find(':');
    if (colon != std::string_view::npos) out += userinfo.substr(0, colon + 1);
    out += "***";
    rest = rest.substr(at);
  }
  if (const auto q = rest.find_first_of("?#"); q != std::string_view::npos) {
    out += rest.substr(0, q + 1);
    out += "***";
  } else {
    out += rest;
  }
  return out;
}

std::optional<std::string> parse_redis_url(std::string_view url, RedisConfig& out) {
  // Messages never quote the url: it may carry a password.
  bool tls = false;
  std::string_view rest;
  if (url.starts_with("redis://")) {
    rest = url.substr(8);
  } else if (url.starts_with("rediss://")) {
    tls = true;
    rest = url.substr(9);
  } else {
    return "must start with redis:// or rediss://";
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return "must not have a query string or fragment";
  }
  const auto slash = rest.find('/');
  const auto authority = rest.substr(0, slash);
  const auto db_text =
      slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);

  // [[user]:password@] as in the IANA redis URI scheme: a lone word is a password.
  std::string user;
  std::string password;
  auto host_port = authority;
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    const auto userinfo = authority.substr(0, at);
    host_port = authority.substr(at + 1);
    const auto colon = userinfo.find(':');
    auto u = percent_decode(colon == std::string_view::npos ? std::string_view{}
                                                            : userinfo.substr(0, colon));
    auto p =
        percent_decode(colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1));
    if (!u || !p) return "has an invalid percent-escape";
    user = std::move(*u);
    password = std::move(*p);
  }

  std::string_view host;
  std::string_view port_text;
  if (host_port.starts_with('[')) {
    const auto close = host_port.find(']');
    if (close == std::string_view::npos) return "has an invalid host";
    host = host_port.substr(1, close - 1);
    if (!parse_ip_literal(host, IpFamily::kV6)) return "has an invalid host";
    const auto after = host_port.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return "has an invalid host";
      port_text = after.substr(1);
      if (port_text.empty()) return "port must be between 1 and 65535";
    }
  } else {
    const auto colon = host_port.find(':');
    host = host_port.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = host_port.substr(colon + 1);
      if (port_text.empty()) return "port must be between 1 and 65535";
    }
    if (!host.empty() && !config::is_host_name(host)) return "has an invalid host";
  }
  if (host.empty()) return "has no host";
  std::uint16_t port = kDefaultRedisPort;
  if (!port_text.empty()) {
    const auto p = config::parse_port(port_text, 1);
    if (!p) return "port must be between 1 and 65535";
    port = *p;
  }
  int db = 0;
  if (!db_text.empty()) {
    const auto r = std::from_chars(db_text.data(), db_text.data() + db_text.size(), db);
    if (!ascii::all_digits(db_text) || r.ec != std::errc() ||
        r.ptr != db_text.data() + db_text.size()) {
      return "database must be a non-negative integer";
    }
  }
  out.tls = tls;
  out.host = std::string(host);
  out.port = port;
  out.user = std::move(user);
  out.password = std::move(password);
  out.db = db;
  return std::nullopt;
}

}  // namespace sluice
