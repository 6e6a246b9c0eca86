// IP addresses, CIDR ranges and client-IP resolution (X-Forwarded-For is
// believed only from server.trusted_proxies).
// Pure functions: no sockets, no Asio.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/ip_literal.hpp"

namespace sluice {

// An IPv4 or IPv6 address. IPv4 is kept as an IPv4-mapped IPv6 address so that
// ::ffff:1.2.3.4 and 1.2.3.4 compare equal.
struct IpAddress {
  std::array<std::uint8_t, 16> bytes{};
  bool is_v4() const;
  std::string to_string() const;  // dotted quad for IPv4, RFC 5952 text for IPv6
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

// The whole of `text` is an address of that family as inet_pton reads it: no
// brackets, spaces or port (see parse_ip_literal_bytes), as an IpAddress. The
// other address parsers here build on it.
std::optional<IpAddress> parse_ip_literal(std::string_view text, IpFamily family);

// Parses "1.2.3.4", "::1", "[::1]" (brackets allowed); surrounding spaces are trimmed.
// An IPv4 address with a port ("1.2.3.4:5678") is accepted, the port dropped,
// because some proxies write X-Forwarded-For that way.
std::optional<IpAddress> parse_ip(std::string_view text);

struct Cidr {
  IpAddress network;
  unsigned prefix = 0;  // 0..128, in IPv6 terms (IPv4 /n is stored as /(96+n))
  bool contains(const IpAddress& ip) const;
  std::string to_string() const;
};

// Parses "10.0.0.0/8", "::1/128", or a bare address (a host route).
std::optional<Cidr> parse_cidr(std::string_view text);

bool is_trusted(const IpAddress& ip, std::span<const Cidr> trusted);

// The client IP for a request from `peer` carrying the given X-Forwarded-For
// header values (in order of appearance; each may hold a comma list).
// The peer is the client unless it is trusted; then the right-most entry of
// X-Forwarded-For that is not itself trusted. If every entry is trusted, the
// left-most one. An unparsable entry ends the walk: it is taken as the client
// address is unknowable beyond it, so the last trusted hop is used.
IpAddress resolve_client_ip(const IpAddress& peer, std::span<const std::string_view> xff_values,
                            std::span<const Cidr> trusted);

}  // namespace sluice
