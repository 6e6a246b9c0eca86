// The configuration's text rules, without YAML.
#include <catch2/catch.hpp>

#include <string>
#include <variant>

#include "gateway/config/text.hpp"

namespace sluice::config {
namespace {

std::string address_error(std::string_view text, bool listener) {
  const auto parsed = parse_address(text, listener);
  const auto* message = std::get_if<std::string>(&parsed);
  return message ? *message : std::string();
}

TEST_CASE("text: shown escapes and cuts values for messages", "[config]") {
  CHECK(shown("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(shown("a\nb\tc\x01\x7f") == "\"a\\nb\\tc\\x01\\x7f\"");
  const std::string long_value(kMaxShownBytes + 5, 'v');
  CHECK(shown(long_value) == "\"" + std::string(kMaxShownBytes, 'v') + "...\"");
}

TEST_CASE("text: numbers, tokens, names and hosts", "[config]") {
  CHECK(format_number(50) == "50");
  CHECK(format_number(0.5) == "0.5");
  CHECK(is_token("X-Tenant"));
  CHECK(is_token("GET"));
  CHECK_FALSE(is_token("a b"));
  CHECK_FALSE(is_token(""));
  CHECK(is_valid_name("orders_v2.eu-1"));
  CHECK_FALSE(is_valid_name("a/b"));
  CHECK_FALSE(is_valid_name(std::string(65, 'n')));
  CHECK(is_host_name("api.example.com"));
  CHECK_FALSE(is_host_name("a b"));
}

TEST_CASE("text: ports and addresses", "[config]") {
  CHECK(parse_port("0", 0) == 0);
  CHECK_FALSE(parse_port("0", 1));
  CHECK(parse_port("65535", 1) == 65535);
  CHECK_FALSE(parse_port("65536", 1));
  CHECK_FALSE(parse_port("+80", 1));
  const auto a = std::get<HostPort>(parse_address("[::1]:8443", true));
  CHECK(a.host == "::1");
  CHECK(a.port == 8443);
  CHECK(std::get<HostPort>(parse_address("orders.internal:9001", false)).host == "orders.internal");
  CHECK(address_error("orders.internal:9001", true) ==
        "host must be an IP address, not a name, got \"orders.internal:9001\"");
  CHECK(address_error("::1:80", false) ==
        "IPv6 addresses need brackets, e.g. \"[::1]:8080\", got \"::1:80\"");
  CHECK(address_error("1.2.3:80", false) == "invalid IPv4 address \"1.2.3\"");
  CHECK(address_error("h:0", false) == "port must be between 1 and 65535, got \"h:0\"");
}

}  // namespace
}  // namespace sluice::config
