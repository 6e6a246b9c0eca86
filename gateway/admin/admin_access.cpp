#include "gateway/admin/admin_access.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "common/ascii.hpp"
#include "common/ip_literal.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

// The port of a Host value: 1 to 5 digits.
bool is_host_port(std::string_view s) {
  return s.size() <= 5 && ascii::all_digits(s);
}

// The 16 bytes of an IPv6 literal, or of an IPv4 one mapped into IPv6.
std::optional<std::array<std::uint8_t, 16>> literal_address_bytes(std::string_view text) {
  std::array<std::uint8_t, 16> bytes{};
  if (parse_ip_literal_bytes(text, IpFamily::kV6, bytes.data())) return bytes;
  std::uint8_t v4[4];
  if (!parse_ip_literal_bytes(text, IpFamily::kV4, v4)) return std::nullopt;
  bytes[10] = bytes[11] = 0xff;
  std::copy(v4, v4 + 4, bytes.begin() + 12);
  return bytes;
}

bool is_loopback_bytes(const std::array<std::uint8_t, 16>& a) {
  static constexpr std::array<std::uint8_t, 16> kV6Loopback{0, 0, 0, 0, 0, 0, 0, 0,
                                                            0, 0, 0, 0, 0, 0, 0, 1};
  const bool mapped = std::all_of(a.begin(), a.begin() + 10, [](auto b) { return b == 0; }) &&
                      a[10] == 0xff && a[11] == 0xff;
  return a == kV6Loopback || (mapped && a[12] == 127);
}

AdminResponse forbidden_problem(std::string_view detail) {
  return problem_response(403, detail);
}

std::string_view head_field(const AdminRequest& head, http::field field) {
  const auto it = head.find(field);
  return it == head.end() ? std::string_view{} : std::string_view(it->value());
}

}  // namespace

std::optional<std::string_view> bearer_token(std::string_view authorization) {
  const std::string_view value = ascii::trim(authorization);
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size()) return std::nullopt;
  if (!ascii::iequals(value.substr(0, kScheme.size()), kScheme)) return std::nullopt;
  const std::string_view token = ascii::trim(value.substr(kScheme.size()));
  if (token.empty()) return std::nullopt;
  return token;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of the longer string is looked at, whatever the contents.
  const std::size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::optional<AdminResponse> refuse_admin_request(const AdminRequest& request,
                                                  const AdminAccess& access) {
  if (access.token.empty()) {
    if (access.loopback_listener) return std::nullopt;
    return json_response(http::status::forbidden,
                         {{"error",
                           "admin.token_file is not set: this endpoint answers only on a loopback "
                           "admin listener"}});
  }
  const auto header = request.find(http::field::authorization);
  const auto token =
      header == request.end() ? std::nullopt : bearer_token(std::string_view(header->value()));
  if (token && constant_time_equal(*token, access.token)) return std::nullopt;
  auto res = json_response(http::status::unauthorized, {{"error", "missing or wrong admin token"}});
  res.set(http::field::www_authenticate, "Bearer");
  return res;
}

std::optional<std::string_view> host_without_port(std::string_view host) {
  std::string_view name = host;
  std::string_view port;
  if (host.starts_with('[')) {
    const auto close = host.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    name = host.substr(1, close - 1);
    const std::string_view rest = host.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
      if (!is_host_port(port)) return std::nullopt;
    }
  } else if (const auto colon = host.rfind(':'); colon != std::string_view::npos) {
    name = host.substr(0, colon);
    port = host.substr(colon + 1);
    if (!is_host_port(port) || name.find(':') != std::string_view::npos) return std::nullopt;
  }
  if (name.empty()) return std::nullopt;
  return name;
}

bool admin_host_allowed(std::string_view host, std::string_view local,
                        const std::vector<std::string>& names) {
  const auto name = host_without_port(ascii::trim(host));
  if (!name) return false;
  if (const auto bytes = literal_address_bytes(*name)) {
    if (is_loopback_bytes(*bytes)) return true;
    // The address the connection arrived on (a probe of a pod's IP).
    const auto own = literal_address_bytes(local.substr(0, local.find('%')));
    return own && *own == *bytes;
  }
  std::string_view bare = *name;
  if (bare.ends_with('.')) bare.remove_suffix(1);  // "localhost." is "localhost"
  if (ascii::iequals(bare, "localhost")) return true;
  return std::any_of(names.begin(), names.end(),
                     [&](const std::string& allowed) { return ascii::iequals(bare, allowed); });
}

std::string_view media_type(std::string_view content_type) {
  return ascii::trim(content_type.substr(0, content_type.find(';')));
}

std::optional<AdminResponse> refuse_browser_request(const AdminRequest& head,
                                                    std::string_view local,
                                                    const std::vector<std::string>& names,
                                                    std::string_view body_type) {
  const std::string_view host = ascii::trim(head_field(head, http::field::host));
  if (!admin_host_allowed(host, local, names)) {
    return forbidden_problem(
        "the Host header names neither a loopback address, the admin's own address nor a name "
        "of admin.hosts");
  }
  if (head.find(http::field::origin) != head.end()) {
    const std::string_view origin = ascii::trim(head_field(head, http::field::origin));
    constexpr std::string_view kScheme = "http://";
    const bool own = origin.size() == kScheme.size() + host.size() &&
                     ascii::iequals(origin.substr(0, kScheme.size()), kScheme) &&
                     ascii::iequals(origin.substr(kScheme.size()), host);
    if (!own) return forbidden_problem("a request from a web page of another origin (Origin)");
  }
  if (const auto site = head.find("Sec-Fetch-Site"); site != head.end()) {
    const std::string_view value = ascii::trim(std::string_view(site->value()));
    if (!ascii::iequals(value, "same-origin") && !ascii::iequals(value, "none")) {
      return forbidden_problem("a request from a web page of another origin (Sec-Fetch-Site)");
    }
  }
  const auto method = head.method();
  const bool has_body_method =
      method == http::verb::post || method == http::verb::put || method == http::verb::patch;
  // No Content-Type at all is taken as the endpoint's own: every browser sends
  // Origin with a POST or PUT (refused above when it is another site's), and
  // scripts written against the API before this rule often send none.
  const auto content_type = head.find(http::field::content_type);
  if (has_body_method && !body_type.empty() && content_type != head.end() &&
      !ascii::iequals(media_type(content_type->value()), body_type)) {
    return problem_response(415, "this endpoint takes Content-Type: " + std::string(body_type), {});
  }
  return std::nullopt;
}

}  // namespace sluice
