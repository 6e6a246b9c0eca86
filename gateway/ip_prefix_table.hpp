// A table of IPv4 and IPv6 prefixes, each with a verdict, answering "which
// verdict does the longest prefix holding this address carry?" A
// path-compressed binary trie over the 128-bit address (IPv4 as IPv4-mapped
// IPv6), kept in one vector: a lookup visits one node per branch point on its
// path (about log2 of the entries, at most 129), never a list of entries.
// Pure: no sockets. Built once (by the configuration), then only read, from
// any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "gateway/client_ip.hpp"

namespace sluice {

class IpPrefixTable {
 public:
  enum class Verdict : std::uint8_t { kAllow, kDeny };

  // Adds `cidr` (its host bits clear, as parse_cidr gives it) with `verdict`.
  // The same prefix added again keeps its first verdict; returns that verdict
  // so the caller can tell a repeat from a conflict.
  Verdict add(const Cidr& cidr, Verdict verdict);

  // The verdict of the longest prefix holding `ip`; nullopt when none does.
  std::optional<Verdict> find(const IpAddress& ip) const;

  bool empty() const { return entries_ == 0; }
  std::size_t size() const { return entries_; }

 private:
  struct Bits {
    std::uint64_t hi = 0;
    std::uint64_t lo = 0;
  };
  struct Node {
    Bits key;               // the prefix's bits, those past `length` clear
    std::uint8_t length = 0;  // 0..128
    bool has_verdict = false;
    Verdict verdict = Verdict::kAllow;
    std::uint32_t child[2] = {kNone, kNone};  // by the bit at `length`
  };
  static constexpr std::uint32_t kNone = 0xffffffff;

  static Bits bits_of(const IpAddress& ip);
  static Bits masked(Bits b, unsigned length);
  static unsigned common_length(Bits a, Bits b, unsigned limit);
  static unsigned bit_at(Bits b, unsigned index);

  std::uint32_t make_node(Bits key, unsigned length);

  std::vector<Node> nodes_;  // nodes_[0] is the root (when any)
  std::size_t entries_ = 0;
};

}  // namespace sluice
