// IP address literals: the one inet_pton wrapper.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "common/ip_literal.hpp"

namespace sluice {
namespace {

TEST_CASE("parse_ip_literal_bytes: the whole text, one family", "[common]") {
  std::uint8_t bytes[16] = {};
  CHECK(parse_ip_literal_bytes("10.0.0.1", IpFamily::kV4, bytes));
  CHECK(bytes[0] == 10);
  CHECK(bytes[3] == 1);
  CHECK(parse_ip_literal_bytes("::1", IpFamily::kV6, bytes));
  CHECK(bytes[15] == 1);
  CHECK_FALSE(parse_ip_literal_bytes("::1", IpFamily::kV4, bytes));
  CHECK_FALSE(parse_ip_literal_bytes("10.0.0.1", IpFamily::kV6, bytes));
  CHECK_FALSE(parse_ip_literal_bytes("[::1]", IpFamily::kV6, bytes));
  CHECK_FALSE(parse_ip_literal_bytes(" 10.0.0.1", IpFamily::kV4, bytes));
  CHECK_FALSE(parse_ip_literal_bytes("fe80::1%eth0", IpFamily::kV6, bytes));
  CHECK_FALSE(parse_ip_literal_bytes("", IpFamily::kV4, bytes));
  CHECK_FALSE(parse_ip_literal_bytes(std::string(64, '1'), IpFamily::kV4, bytes));
}

TEST_CASE("is_ip_address: addresses apart from DNS names", "[common]") {
  CHECK(is_ip_address("127.0.0.1"));
  CHECK(is_ip_address("::1"));
  CHECK(is_ip_address("::ffff:1.2.3.4"));
  CHECK(is_ip_address("fe80::1%eth0"));  // an IPv6 zone
  CHECK(is_ip_address("fe80::1%"));
  CHECK_FALSE(is_ip_address("1.2.3.4%eth0"));  // zones are IPv6 only
  CHECK_FALSE(is_ip_address("redis.example.com"));
  CHECK_FALSE(is_ip_address("[::1]"));
  CHECK_FALSE(is_ip_address("1.2.3"));
  CHECK_FALSE(is_ip_address(""));
}

}  // namespace
}  // namespace sluice
