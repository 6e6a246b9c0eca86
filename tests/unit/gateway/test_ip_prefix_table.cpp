// The prefix table behind ip_access: longest-prefix verdicts, checked against
// a scan of every entry on random tables, and the cases around IPv4, IPv6
// and nesting.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "gateway/ip_prefix_table.hpp"

namespace sluice {
namespace {

using Verdict = IpPrefixTable::Verdict;

Cidr table_cidr(std::string_view text) {
  const auto c = parse_cidr(text);
  INFO(std::string(text));
  REQUIRE(c);
  return *c;
}

IpAddress table_ip(std::string_view text) {
  const auto a = parse_ip(text);
  INFO(std::string(text));
  REQUIRE(a);
  return *a;
}

// The verdict of the longest entry holding `address`, by scanning them all.
std::optional<Verdict> scan(const std::vector<std::pair<Cidr, Verdict>>& entries,
                            const IpAddress& address) {
  std::optional<Verdict> best;
  int best_length = -1;
  for (const auto& [c, v] : entries) {
    if (c.contains(address) && static_cast<int>(c.prefix) > best_length) {
      best = v;
      best_length = static_cast<int>(c.prefix);
    }
  }
  return best;
}

}  // namespace

TEST_CASE("the longest listed prefix decides", "[ip_access]") {
  IpPrefixTable table;
  CHECK(table.empty());
  CHECK_FALSE(table.find(table_ip("10.1.2.3")));
  table.add(table_cidr("10.0.0.0/8"), Verdict::kAllow);
  table.add(table_cidr("10.1.0.0/16"), Verdict::kDeny);
  table.add(table_cidr("10.1.2.0/24"), Verdict::kAllow);
  table.add(table_cidr("10.1.2.3"), Verdict::kDeny);
  table.add(table_cidr("2001:db8::/32"), Verdict::kDeny);
  table.add(table_cidr("2001:db8:1::/48"), Verdict::kAllow);
  CHECK(table.size() == 6);
  CHECK(table.find(table_ip("10.9.9.9")) == Verdict::kAllow);
  CHECK(table.find(table_ip("10.1.9.9")) == Verdict::kDeny);
  CHECK(table.find(table_ip("10.1.2.4")) == Verdict::kAllow);
  CHECK(table.find(table_ip("10.1.2.3")) == Verdict::kDeny);
  CHECK(table.find(table_ip("::ffff:10.1.2.3")) == Verdict::kDeny);  // the same address
  CHECK_FALSE(table.find(table_ip("11.0.0.1")));
  CHECK(table.find(table_ip("2001:db8:ffff::1")) == Verdict::kDeny);
  CHECK(table.find(table_ip("2001:db8:1:2::1")) == Verdict::kAllow);
  CHECK_FALSE(table.find(table_ip("2001:db9::1")));
}

TEST_CASE("IPv4's 0.0.0.0/0 holds every IPv4 address and no IPv6 one; ::/0 holds all",
          "[ip_access]") {
  IpPrefixTable v4;
  v4.add(table_cidr("0.0.0.0/0"), Verdict::kDeny);
  CHECK(v4.find(table_ip("203.0.113.7")) == Verdict::kDeny);
  CHECK_FALSE(v4.find(table_ip("2001:db8::1")));
  IpPrefixTable all;
  all.add(table_cidr("::/0"), Verdict::kDeny);
  CHECK(all.find(table_ip("203.0.113.7")) == Verdict::kDeny);
  CHECK(all.find(table_ip("2001:db8::1")) == Verdict::kDeny);
}

TEST_CASE("a prefix added again keeps its first verdict and counts once", "[ip_access]") {
  IpPrefixTable table;
  CHECK(table.add(table_cidr("192.0.2.0/24"), Verdict::kAllow) == Verdict::kAllow);
  CHECK(table.add(table_cidr("192.0.2.9/24"), Verdict::kAllow) == Verdict::kAllow);  // host bits cleared
  CHECK(table.add(table_cidr("192.0.2.0/24"), Verdict::kDeny) == Verdict::kAllow);
  CHECK(table.size() == 1);
  // A prefix that was only a branch point gets its verdict when listed.
  table.add(table_cidr("192.0.3.0/24"), Verdict::kAllow);  // splits at /23
  CHECK_FALSE(table.find(table_ip("192.0.2.0")) == Verdict::kDeny);
  table.add(table_cidr("192.0.2.0/23"), Verdict::kDeny);
  CHECK(table.size() == 3);
  CHECK(table.find(table_ip("192.0.2.1")) == Verdict::kAllow);
  CHECK(table.find(table_ip("192.0.3.1")) == Verdict::kAllow);
}

TEST_CASE("random tables answer as a scan of every entry does", "[ip_access]") {
  std::mt19937_64 rng(20261204);
  for (int round = 0; round < 20; ++round) {
    IpPrefixTable table;
    std::vector<std::pair<Cidr, Verdict>> entries;
    // Addresses from a few small neighbourhoods, so that prefixes nest and part often.
    const auto random_address = [&] {
      IpAddress a;
      const bool v4 = rng() % 2 == 0;
      if (v4) {
        a.bytes[10] = a.bytes[11] = 0xff;
        a.bytes[12] = static_cast<std::uint8_t>(10 + rng() % 3);
        for (int i = 13; i < 16; ++i) a.bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(rng() % 4);
      } else {
        a.bytes[0] = 0x20;
        a.bytes[1] = 0x01;
        for (int i = 2; i < 16; ++i) a.bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(rng() % 3);
      }
      return a;
    };
    for (int i = 0; i < 300; ++i) {
      const IpAddress a = random_address();
      const unsigned prefix = a.is_v4() ? 96 + static_cast<unsigned>(rng() % 33)
                                        : static_cast<unsigned>(rng() % 129);
      Cidr c = *parse_cidr(a.to_string() + "/" + std::to_string(a.is_v4() ? prefix - 96 : prefix));
      const Verdict v = rng() % 2 ? Verdict::kAllow : Verdict::kDeny;
      const Verdict kept = table.add(c, v);
      bool seen = false;
      for (const auto& [e, ev] : entries) {
        if (e.prefix == c.prefix && e.network == c.network) {
          seen = true;
          CHECK(kept == ev);
        }
      }
      if (!seen) entries.emplace_back(c, v);
    }
    CHECK(table.size() == entries.size());
    for (int i = 0; i < 2000; ++i) {
      const IpAddress a = random_address();
      INFO(a.to_string());
      CHECK(table.find(a) == scan(entries, a));
    }
  }
}

}  // namespace sluice
