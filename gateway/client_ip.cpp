#include "gateway/client_ip.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/ascii.hpp"

namespace sluice {
namespace {

using ascii::all_digits;
using ascii::trim;

// Longer than any address text we accept ("[ffff:...:255.255.255.255]:65535").
constexpr std::size_t kMaxAddressText = 64;

constexpr std::array<std::uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

// A bare address literal: "1.2.3.4", "::1" or "[::1]"; no port.
std::optional<IpAddress> parse_literal(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    return parse_ip_literal(text.substr(1, text.size() - 2), IpFamily::kV6);
  }
  if (text.find(':') == std::string_view::npos) return parse_ip_literal(text, IpFamily::kV4);
  return parse_ip_literal(text, IpFamily::kV6);
}

bool valid_port(std::string_view s) {
  return all_digits(s) && s.size() <= 5;
}

}  // namespace

std::optional<IpAddress> parse_ip_literal(std::string_view text, IpFamily family) {
  IpAddress ip;
  if (family == IpFamily::kV4) {
    std::uint8_t v4[4];
    if (!parse_ip_literal_bytes(text, family, v4)) return std::nullopt;
    std::copy(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), ip.bytes.begin());
    std::copy(v4, v4 + 4, ip.bytes.begin() + 12);
  } else {
    if (!parse_ip_literal_bytes(text, family, ip.bytes.data())) return std::nullopt;
  }
  return ip;
}

bool IpAddress::is_v4() const {
  return std::equal(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), bytes.begin());
}

std::string IpAddress::to_string() const {
  if (is_v4()) {
    return std::to_string(bytes[12]) + "." + std::to_string(bytes[13]) + "." +
           std::to_string(bytes[14]) + "." + std::to_string(bytes[15]);
  }
  // RFC 5952: lower-case hex, no leading zeros, the longest run (>= 2) of zero
  // groups compressed to "::" (the first one on a tie).
  std::array<unsigned, 8> groups{};
  for (std::size_t i = 0; i < 8; ++i) groups[i] = (bytes[2 * i] << 8) | bytes[2 * i + 1];
  int best_start = -1;
  int best_len = 0;
  for (int i = 0; i < 8;) {
    if (groups[i] != 0) {
      ++i;
      continue;
    }
    int j = i;
    while (j < 8 && groups[j] == 0) ++j;
    if (j - i > best_len) {
      best_start = i;
      best_len = j - i;
    }
    i = j;
  }
  if (best_len < 2) best_start = -1;

  std::string out;
  char hex[8];
  for (int i = 0; i < 8; ++i) {
    if (i == best_start) {
      out += "::";
      i += best_len - 1;
      continue;
    }
    if (!out.empty() && out.back() != ':') out += ':';
    std::snprintf(hex, sizeof hex, "%x", groups[i]);
    out += hex;
  }
  return out;
}

std::optional<IpAddress> parse_ip(std::string_view text) {
  text = trim(text);
  if (text.empty() || text.size() >= kMaxAddressText) return std::nullopt;
  if (text.front() == '[') {
    // "[v6]" or "[v6]:port".
    const auto close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    const auto rest = text.substr(close + 1);
    if (!rest.empty() && !(rest.front() == ':' && valid_port(rest.substr(1)))) return std::nullopt;
    return parse_ip_literal(text.substr(1, close - 1), IpFamily::kV6);
  }
  const auto colon = text.find(':');
  if (colon != std::string_view::npos && text.find(':', colon + 1) == std::string_view::npos) {
    // Exactly one colon can only be IPv4 with a port.
    if (!valid_port(text.substr(colon + 1))) return std::nullopt;
    return parse_ip_literal(text.substr(0, colon), IpFamily::kV4);
  }
  return parse_literal(text);
}

bool Cidr::contains(const IpAddress& ip) const {
  const unsigned full_bytes = prefix / 8;
  if (!std::equal(network.bytes.begin(), network.bytes.begin() + full_bytes, ip.bytes.begin())) {
    return false;
  }
  const unsigned rest_bits = prefix % 8;
  if (rest_bits == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xff << (8 - rest_bits));
  return (network.bytes[full_bytes] & mask) == (ip.bytes[full_bytes] & mask);
}

std::string Cidr::to_string() const {
  if (network.is_v4() && prefix >= 96) {
    return network.to_string() + "/" + std::to_string(prefix - 96);
  }
  return network.to_string() + "/" + std::to_string(prefix);
}

std::optional<Cidr> parse_cidr(std::string_view text) {
  text = trim(text);
  const auto slash = text.find('/');
  const auto addr = parse_literal(text.substr(0, slash));
  if (!addr) return std::nullopt;
  // The prefix is written in the family of the text: /0..32 for IPv4, /0..128 for IPv6.
  const bool v4_text = text.substr(0, slash).find(':') == std::string_view::npos;
  const unsigned max_bits = v4_text ? 32 : 128;
  unsigned bits = max_bits;
  if (slash != std::string_view::npos) {
    const auto digits = text.substr(slash + 1);
    if (!all_digits(digits) || digits.size() > 3) return std::nullopt;
    bits = 0;
    for (char c : digits) bits = bits * 10 + static_cast<unsigned>(c - '0');
    if (bits > max_bits) return std::nullopt;
  }
  Cidr cidr{*addr, v4_text ? bits + 96 : bits};
  // Clear the host bits so that 10.1.2.3/8 means 10.0.0.0/8.
  for (unsigned i = 0; i < 16; ++i) {
    const unsigned first_bit = i * 8;
    if (first_bit >= cidr.prefix) {
      cidr.network.bytes[i] = 0;
    } else if (cidr.prefix - first_bit < 8) {
      cidr.network.bytes[i] &= static_cast<std::uint8_t>(0xff << (8 - (cidr.prefix - first_bit)));
    }
  }
  return cidr;
}

bool is_trusted(const IpAddress& ip, std::span<const Cidr> trusted) {
  return std::any_of(trusted.begin(), trusted.end(),
                     [&](const Cidr& cidr) { return cidr.contains(ip); });
}

IpAddress resolve_client_ip(const IpAddress& peer, std::span<const std::string_view> xff_values,
                            std::span<const Cidr> trusted) {
  if (!is_trusted(peer, trusted)) return peer;
  // Walk the hops from the right (nearest) to the left. Several header lines
  // form one list in order of appearance (RFC 9110 5.3).
  IpAddress last_trusted = peer;
  for (auto value = xff_values.rbegin(); value != xff_values.rend(); ++value) {
    std::string_view rest = *value;
    while (!rest.empty()) {
      const auto comma = rest.rfind(',');
      const auto entry = trim(comma == std::string_view::npos ? rest : rest.substr(comma + 1));
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(0, comma);
      if (entry.empty()) continue;  // empty list elements are allowed and ignored
      const auto ip = parse_ip(entry);
      if (!ip) return last_trusted;  // nothing to the left of garbage can be believed
      if (!is_trusted(*ip, trusted)) return *ip;
      last_trusted = *ip;
    }
  }
  return last_trusted;
}

}  // namespace sluice
