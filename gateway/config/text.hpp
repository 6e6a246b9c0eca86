// Text rules of the configuration, free of YAML: names, header tokens, host
// names, IP literals, ports and "host:port" addresses, and how a value is shown
// in a message. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "gateway/client_ip.hpp"
#include "upstream/upstream_config.hpp"

namespace sluice::config {

// Longer values are cut in messages.
constexpr std::size_t kMaxShownBytes = 120;

// A value as messages show it: in double quotes, with quotes, backslashes and
// control characters escaped, cut after kMaxShownBytes. (Not "quoted":
// std::quoted would win by argument-dependent lookup on a std::string.)
std::string shown(std::string_view s);

// 50 -> "50", 0.5 -> "0.5".
std::string format_number(double v);

// RFC 9110 token: header names and methods.
bool is_token(std::string_view s);

// Names of upstreams, limits and routes appear in metric labels, Redis keys and
// RateLimit headers, so they are kept to a safe alphabet: letters, digits,
// "_", "-" and ".", at most 64 bytes.
bool is_valid_name(std::string_view s);

// Consumers (YAML and the consumer store): an API key is 1 to
// kMaxApiKeyBytes bytes without spaces or control characters; an id, which
// appears in admin URLs and X-Consumer-Id, is 1 to kMaxConsumerIdBytes of
// letters, digits and "-", "_", ".", "@", ":", "+", "~", and never contains
// "..". Each returns why a value is not valid, or nothing when it is.
constexpr std::size_t kMaxApiKeyBytes = 256;
constexpr std::size_t kMaxConsumerIdBytes = 128;
std::optional<std::string> api_key_problem(std::string_view key);
std::optional<std::string> consumer_id_problem(std::string_view id);

// Letters, digits, "-", "." and "_", at most 253 bytes.
bool is_host_name(std::string_view s);

// Decimal digits only, between `min` and 65535.
std::optional<std::uint16_t> parse_port(std::string_view s, unsigned min);

// "host:port" or "[v6]:port". A listener needs an IP literal and may use port 0
// (any free port); an upstream server may be a name. Returns an error message.
std::variant<HostPort, std::string> parse_address(std::string_view text, bool listener);

}  // namespace sluice::config
