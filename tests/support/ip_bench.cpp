// How long ip_access takes to decide: a table of N prefixes (IPv4 and IPv6,
// lengths spread as real block lists are), looked up for random addresses,
// half of them inside some entry; beside it, a scan of every entry for the
// same addresses, which is what a list without a trie would cost.
//
//   sluice-ip-bench [ENTRIES] [LOOKUPS]     (defaults 100000 and 2000000)
//
// Prints one line of JSON. Timing is for scripts/bench, never for tests.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "gateway/ip_prefix_table.hpp"

namespace {

using sluice::Cidr;
using sluice::IpAddress;
using sluice::IpPrefixTable;
using Clock = std::chrono::steady_clock;

IpAddress random_address(std::mt19937_64& rng, bool v4) {
  IpAddress a;
  const std::uint64_t r1 = rng();
  const std::uint64_t r2 = rng();
  if (v4) {
    a.bytes[10] = a.bytes[11] = 0xff;
    for (int i = 0; i < 4; ++i) a.bytes[static_cast<std::size_t>(12 + i)] = static_cast<std::uint8_t>(r1 >> (8 * i));
  } else {
    a.bytes[0] = 0x20;
    a.bytes[1] = static_cast<std::uint8_t>(0x01 + (r1 & 0x3));
    for (int i = 2; i < 16; ++i) {
      const std::uint64_t r = i < 9 ? r1 : r2;
      a.bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(r >> (8 * (i % 8)));
    }
  }
  return a;
}

Cidr prefix_of(const IpAddress& a, unsigned prefix) {
  Cidr c{a, prefix};
  for (unsigned i = 0; i < 16; ++i) {
    const unsigned first = i * 8;
    if (first >= prefix) {
      c.network.bytes[i] = 0;
    } else if (prefix - first < 8) {
      c.network.bytes[i] &= static_cast<std::uint8_t>(0xff << (8 - (prefix - first)));
    }
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t entries = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100000;
  const std::size_t lookups = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2000000;
  std::mt19937_64 rng(42);
  std::vector<Cidr> listed;
  listed.reserve(entries);
  // Three in four IPv4 (/16 to /32, mostly /24 and /32), one in four IPv6 (/32 to /128).
  for (std::size_t i = 0; i < entries; ++i) {
    const bool v4 = i % 4 != 3;
    const IpAddress a = random_address(rng, v4);
    static constexpr unsigned kV4[] = {16, 20, 24, 24, 24, 28, 32, 32, 32, 32};
    static constexpr unsigned kV6[] = {32, 48, 48, 56, 64, 64, 64, 96, 128, 128};
    const unsigned length = v4 ? 96 + kV4[rng() % 10] : kV6[rng() % 10];
    listed.push_back(prefix_of(a, length));
  }
  const auto built_at = Clock::now();
  IpPrefixTable table;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    table.add(listed[i], i % 5 == 0 ? IpPrefixTable::Verdict::kAllow : IpPrefixTable::Verdict::kDeny);
  }
  const double build_ms = std::chrono::duration<double, std::milli>(Clock::now() - built_at).count();

  // Half the addresses inside a listed prefix, half random.
  std::vector<IpAddress> probes;
  probes.reserve(4096);
  for (std::size_t i = 0; i < 4096; ++i) {
    if (i % 2 == 0) {
      IpAddress inside = listed[rng() % listed.size()].network;
      inside.bytes[15] |= static_cast<std::uint8_t>(rng() & 0x01);
      probes.push_back(inside);
    } else {
      probes.push_back(random_address(rng, i % 4 != 1));
    }
  }
  std::size_t found = 0;
  const auto trie_at = Clock::now();
  for (std::size_t i = 0; i < lookups; ++i) {
    found += table.find(probes[i & 4095]).has_value() ? 1 : 0;
  }
  const double trie_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - trie_at).count() / static_cast<double>(lookups);

  // The scan: every entry for each address (the longest holder wins).
  const std::size_t scans = std::min<std::size_t>(2000, lookups);
  std::size_t scan_found = 0;
  const auto scan_at = Clock::now();
  for (std::size_t i = 0; i < scans; ++i) {
    unsigned best = 0;
    bool any = false;
    for (const Cidr& c : listed) {
      if (c.contains(probes[i & 4095]) && (!any || c.prefix > best)) {
        best = c.prefix;
        any = true;
      }
    }
    scan_found += any ? 1 : 0;
  }
  const double scan_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - scan_at).count() / static_cast<double>(scans);
  std::printf(
      "{\"entries\": %zu, \"distinct\": %zu, \"build_ms\": %.1f, \"lookups\": %zu, "
      "\"trie_ns_per_lookup\": %.1f, \"scan_ns_per_lookup\": %.1f, \"found_share\": %.3f, "
      "\"scan_found_share\": %.3f}\n",
      entries, table.size(), build_ms, lookups, trie_ns, scan_ns,
      static_cast<double>(found) / static_cast<double>(lookups),
      static_cast<double>(scan_found) / static_cast<double>(scans));
  return 0;
}
