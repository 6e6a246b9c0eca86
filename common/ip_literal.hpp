// IP address literals as inet_pton reads them: the one place address text is
// parsed (client IPs, config addresses, TLS server names). Header-only and
// pure: no sockets, no allocation.
#pragma once

#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace sluice {

enum class IpFamily { kV4, kV6 };

// Parses the whole of `text` as an address of `family` as inet_pton reads it:
// no brackets, spaces, port or zone. Writes 4 bytes (kV4) or 16 bytes (kV6)
// to `out`; false, with `out` unspecified, when `text` is not such an address.
inline bool parse_ip_literal_bytes(std::string_view text, IpFamily family, std::uint8_t* out) {
  // Longer than any address inet_pton accepts; it needs a NUL-terminated copy.
  constexpr std::size_t kMaxText = 64;
  if (text.empty() || text.size() >= kMaxText) return false;
  char buf[kMaxText];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  return inet_pton(family == IpFamily::kV4 ? AF_INET : AF_INET6, buf, out) == 1;
}

// Whether a host name is an IP address rather than a DNS name, as TLS host
// name verification tells them apart: an IPv6 address, which may carry a
// "%zone" suffix, or an IPv4 address.
inline bool is_ip_address(std::string_view host) {
  std::uint8_t bytes[16];
  return parse_ip_literal_bytes(host.substr(0, host.find('%')), IpFamily::kV6, bytes) ||
         parse_ip_literal_bytes(host, IpFamily::kV4, bytes);
}

}  // namespace sluice
