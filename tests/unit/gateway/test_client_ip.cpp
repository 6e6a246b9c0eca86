// IP parsing, CIDR ranges and client-IP resolution through trusted proxies.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gateway/client_ip.hpp"

namespace sluice {
namespace {

IpAddress ip(std::string_view text) {
  const auto parsed = parse_ip(text);
  INFO(std::string(text));
  REQUIRE(parsed);
  return *parsed;
}

std::vector<Cidr> cidrs(std::initializer_list<std::string_view> texts) {
  std::vector<Cidr> out;
  for (const auto t : texts) {
    const auto c = parse_cidr(t);
    INFO(std::string(t));
    REQUIRE(c);
    out.push_back(*c);
  }
  return out;
}

std::string resolve(std::string_view peer, std::vector<std::string_view> xff,
                    const std::vector<Cidr>& trusted) {
  return resolve_client_ip(ip(peer), xff, trusted).to_string();
}

}  // namespace

TEST_CASE("parse_ip: IPv4 is stored IPv4-mapped", "[client_ip]") {
  const auto a = ip("192.0.2.7");
  CHECK(a.is_v4());
  CHECK(a.to_string() == "192.0.2.7");
  CHECK(a.bytes[10] == 0xff);
  CHECK(a.bytes[11] == 0xff);
  CHECK(a.bytes[12] == 192);
  CHECK(a.bytes[15] == 7);
  // The mapped IPv6 form is the same address.
  CHECK(ip("::ffff:192.0.2.7") == a);
  CHECK(ip("::FFFF:c000:207") == a);
  CHECK(ip("::ffff:192.0.2.7").to_string() == "192.0.2.7");
}

TEST_CASE("parse_ip: IPv6, brackets, ports and spaces", "[client_ip]") {
  CHECK_FALSE(ip("::1").is_v4());
  CHECK(ip("::1").to_string() == "::1");
  CHECK(ip("[2001:db8::1]") == ip("2001:db8::1"));
  CHECK(ip("[2001:db8::1]:443") == ip("2001:db8::1"));
  CHECK(ip("  10.0.0.1\t") == ip("10.0.0.1"));
  CHECK(ip("10.0.0.1:5678") == ip("10.0.0.1"));  // some proxies append the port
  CHECK_FALSE(ip("::").is_v4());
}

TEST_CASE("parse_ip rejects garbage", "[client_ip]") {
  for (const auto* bad :
       {"", " ", "unknown", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.3.4:", "1.2.3.4:http",
        "1.2.3.4:123456", "[::1", "[::1]x", "[::1]:", "[1.2.3.4]", "::1::2", "fe80::1%eth0",
        "1.2.3.4/32", "_hidden", "2001:db8::1:80:x", "0x7f.1.1.1"}) {
    INFO(bad);
    CHECK_FALSE(parse_ip(bad));
  }
  CHECK_FALSE(parse_ip(std::string(200, '1')));
}

TEST_CASE("parse_ip_literal takes the bare literal of one family only", "[client_ip]") {
  CHECK(parse_ip_literal("10.0.0.1", IpFamily::kV4) == ip("10.0.0.1"));
  CHECK(parse_ip_literal("fe80::1", IpFamily::kV6) == ip("fe80::1"));
  for (const auto* bad : {"", "10.0.0.256", " 10.0.0.1", "10.0.0.1:80", "::1"}) {
    INFO(bad);
    CHECK_FALSE(parse_ip_literal(bad, IpFamily::kV4));
  }
  for (const auto* bad : {"[::1]", "10.0.0.1", "::1 ", "fe80::zz"}) {
    INFO(bad);
    CHECK_FALSE(parse_ip_literal(bad, IpFamily::kV6));
  }
  CHECK_FALSE(parse_ip_literal(std::string(64, '1'), IpFamily::kV6));
}

TEST_CASE("IPv6 text follows RFC 5952", "[client_ip]") {
  CHECK(ip("2001:0DB8:0000:0000:0000:0000:0000:0001").to_string() == "2001:db8::1");
  CHECK(ip("2001:db8:0:1:1:1:1:1").to_string() == "2001:db8:0:1:1:1:1:1");  // one zero group
  CHECK(ip("2001:0:0:1:0:0:0:1").to_string() == "2001:0:0:1::1");           // the longest run
  CHECK(ip("2001:db8:0:0:1:0:0:1").to_string() == "2001:db8::1:0:0:1");     // the first on a tie
  CHECK(ip("::").to_string() == "::");
  CHECK(ip("1::").to_string() == "1::");
  CHECK(ip("::2:3").to_string() == "::2:3");  // not dotted: not IPv4-mapped
  CHECK(ip("fe80::abcd:ef01").to_string() == "fe80::abcd:ef01");
}

TEST_CASE("parse_cidr and contains", "[client_ip]") {
  SECTION("IPv4 ranges match IPv4 and IPv4-mapped addresses") {
    const auto c = *parse_cidr("10.0.0.0/8");
    CHECK(c.prefix == 104);
    CHECK(c.to_string() == "10.0.0.0/8");
    CHECK(c.contains(ip("10.255.1.2")));
    CHECK(c.contains(ip("::ffff:10.1.1.1")));
    CHECK_FALSE(c.contains(ip("11.0.0.1")));
    CHECK_FALSE(c.contains(ip("::a00:1")));  // IPv4-compatible is not IPv4-mapped
  }
  SECTION("host bits are masked") {
    const auto c = *parse_cidr("192.168.17.99/20");
    CHECK(c.to_string() == "192.168.16.0/20");
    CHECK(c.contains(ip("192.168.31.255")));
    CHECK_FALSE(c.contains(ip("192.168.32.0")));
    CHECK(parse_cidr("2001:db8:abcd::1/33")->to_string() == "2001:db8:8000::/33");
  }
  SECTION("a bare address is a host route") {
    const auto v4 = *parse_cidr("127.0.0.1");
    CHECK(v4.to_string() == "127.0.0.1/32");
    CHECK(v4.contains(ip("127.0.0.1")));
    CHECK_FALSE(v4.contains(ip("127.0.0.2")));
    const auto v6 = *parse_cidr("::1");
    CHECK(v6.prefix == 128);
    CHECK(v6.contains(ip("::1")));
    CHECK_FALSE(v6.contains(ip("127.0.0.1")));
  }
  SECTION("/0 matches everything of every family") {
    CHECK(parse_cidr("0.0.0.0/0")->contains(ip("203.0.113.9")));
    CHECK_FALSE(parse_cidr("0.0.0.0/0")->contains(ip("2001:db8::1")));
    CHECK(parse_cidr("::/0")->contains(ip("2001:db8::1")));
    CHECK(parse_cidr("::/0")->contains(ip("203.0.113.9")));
  }
  SECTION("IPv6 ranges") {
    const auto c = *parse_cidr("fd00::/8");
    CHECK(c.contains(ip("fd12:3456::1")));
    CHECK_FALSE(c.contains(ip("fe80::1")));
    CHECK(parse_cidr("[::1]/128")->contains(ip("::1")));
  }
  SECTION("invalid") {
    for (const auto* bad :
         {"", "/8", "10.0.0.0/", "10.0.0.0/33", "::/129", "10.0.0.0/-1", "10.0.0.0/8/8",
          "10.0.0.0/ 8", "10.0.0.0/0008", "host/8", "10.0.0.1:80/32", "10.0.0.0/x"}) {
      INFO(bad);
      CHECK_FALSE(parse_cidr(bad));
    }
  }
}

TEST_CASE("is_trusted", "[client_ip]") {
  const auto trusted = cidrs({"10.0.0.0/8", "::1"});
  CHECK(is_trusted(ip("10.1.2.3"), trusted));
  CHECK(is_trusted(ip("::1"), trusted));
  CHECK_FALSE(is_trusted(ip("127.0.0.1"), trusted));
  CHECK_FALSE(is_trusted(ip("10.1.2.3"), {}));
}

TEST_CASE("resolve_client_ip", "[client_ip]") {
  const auto trusted = cidrs({"127.0.0.1/32", "10.0.0.0/8", "fd00::/8"});

  SECTION("an untrusted peer is the client; its X-Forwarded-For is ignored") {
    CHECK(resolve("203.0.113.5", {"1.1.1.1"}, trusted) == "203.0.113.5");
    CHECK(resolve("203.0.113.5", {"10.0.0.1, 1.1.1.1"}, trusted) == "203.0.113.5");
    CHECK(resolve("2001:db8::5", {"1.1.1.1"}, trusted) == "2001:db8::5");
  }
  SECTION("a trusted peer without X-Forwarded-For is the client") {
    CHECK(resolve("127.0.0.1", {}, trusted) == "127.0.0.1");
    CHECK(resolve("127.0.0.1", {""}, trusted) == "127.0.0.1");
  }
  SECTION("the right-most untrusted entry wins") {
    CHECK(resolve("127.0.0.1", {"198.51.100.7"}, trusted) == "198.51.100.7");
    // A client-forged left-most entry is not believed.
    CHECK(resolve("127.0.0.1", {"6.6.6.6, 198.51.100.7, 10.0.0.2"}, trusted) == "198.51.100.7");
    CHECK(resolve("10.0.0.9", {"198.51.100.7,10.0.0.3,10.0.0.2"}, trusted) == "198.51.100.7");
  }
  SECTION("every entry trusted: the left-most") {
    CHECK(resolve("127.0.0.1", {"10.0.0.1, 10.0.0.2"}, trusted) == "10.0.0.1");
  }
  SECTION("several header lines are one list in order") {
    CHECK(resolve("127.0.0.1", {"6.6.6.6, 198.51.100.7", "10.0.0.2"}, trusted) == "198.51.100.7");
    CHECK(resolve("127.0.0.1", {"198.51.100.7", "10.0.0.3, 10.0.0.2"}, trusted) == "198.51.100.7");
    CHECK(resolve("127.0.0.1", {"10.0.0.1", "10.0.0.2"}, trusted) == "10.0.0.1");
  }
  SECTION("garbage stops the walk at the last trusted hop") {
    CHECK(resolve("127.0.0.1", {"unknown"}, trusted) == "127.0.0.1");
    CHECK(resolve("127.0.0.1", {"1.1.1.1, garbage, 10.0.0.2"}, trusted) == "10.0.0.2");
    CHECK(resolve("127.0.0.1", {"1.1.1.1", "x", "10.0.0.2"}, trusted) == "10.0.0.2");
  }
  SECTION("empty list elements are skipped; spaces and ports are tolerated") {
    CHECK(resolve("127.0.0.1", {"198.51.100.7, ,10.0.0.2,"}, trusted) == "198.51.100.7");
    CHECK(resolve("127.0.0.1", {" 198.51.100.7:4711 "}, trusted) == "198.51.100.7");
    CHECK(resolve("127.0.0.1", {"[2001:db8::7]:443"}, trusted) == "2001:db8::7");
  }
  SECTION("IPv6 and mapped peers") {
    CHECK(resolve("fd00::1", {"2001:db8::9, fd00::2"}, trusted) == "2001:db8::9");
    CHECK(resolve("::ffff:127.0.0.1", {"198.51.100.7"}, trusted) == "198.51.100.7");
  }
  SECTION("an empty trusted list trusts no one") {
    CHECK(resolve("127.0.0.1", {"198.51.100.7"}, {}) == "127.0.0.1");
  }
}

}  // namespace sluice
