#include "gateway/ip_prefix_table.hpp"

#include <algorithm>

namespace sluice {

IpPrefixTable::Bits IpPrefixTable::bits_of(const IpAddress& ip) {
  Bits b;
  for (int i = 0; i < 8; ++i) {
    b.hi = (b.hi << 8) | ip.bytes[static_cast<std::size_t>(i)];
    b.lo = (b.lo << 8) | ip.bytes[static_cast<std::size_t>(i + 8)];
  }
  return b;
}

IpPrefixTable::Bits IpPrefixTable::masked(Bits b, unsigned length) {
  if (length == 0) return {};
  if (length <= 64) return {b.hi & (~std::uint64_t{0} << (64 - length)), 0};
  return {b.hi, b.lo & (~std::uint64_t{0} << (128 - length))};
}

// How many leading bits a and b share, at most `limit`.
unsigned IpPrefixTable::common_length(Bits a, Bits b, unsigned limit) {
  unsigned same = 128;
  if (const std::uint64_t x = a.hi ^ b.hi; x != 0) {
    same = static_cast<unsigned>(__builtin_clzll(x));
  } else if (const std::uint64_t y = a.lo ^ b.lo; y != 0) {
    same = 64 + static_cast<unsigned>(__builtin_clzll(y));
  }
  return std::min(same, limit);
}

unsigned IpPrefixTable::bit_at(Bits b, unsigned index) {
  return index < 64 ? static_cast<unsigned>((b.hi >> (63 - index)) & 1)
                    : static_cast<unsigned>((b.lo >> (127 - index)) & 1);
}

std::uint32_t IpPrefixTable::make_node(Bits key, unsigned length) {
  Node node;
  node.key = key;
  node.length = static_cast<std::uint8_t>(length);
  nodes_.push_back(node);
  return static_cast<std::uint32_t>(nodes_.size() - 1);
}

IpPrefixTable::Verdict IpPrefixTable::add(const Cidr& cidr, Verdict verdict) {
  const unsigned length = std::min(cidr.prefix, 128u);
  const Bits key = masked(bits_of(cidr.network), length);
  if (nodes_.empty()) make_node({}, 0);  // the root: the empty prefix, under which all are
  const auto set = [&](std::uint32_t index) {
    Node& node = nodes_[index];
    if (!node.has_verdict) {
      node.has_verdict = true;
      node.verdict = verdict;
      ++entries_;
    }
    return node.verdict;
  };
  std::uint32_t at = 0;  // a node whose prefix holds `key` and is no longer than it
  for (;;) {
    if (nodes_[at].length == length) return set(at);
    const unsigned side = bit_at(key, nodes_[at].length);
    const std::uint32_t next = nodes_[at].child[side];
    if (next == kNone) {
      const std::uint32_t leaf = make_node(key, length);
      nodes_[at].child[side] = leaf;
      return set(leaf);
    }
    const Node below = nodes_[next];
    const unsigned shared = common_length(key, below.key, std::min<unsigned>(length, below.length));
    if (shared == below.length) {  // `below` holds key: go down
      at = next;
      continue;
    }
    if (shared == length) {  // key holds `below`: it goes between
      const std::uint32_t mid = make_node(key, length);
      nodes_[mid].child[bit_at(below.key, length)] = next;
      nodes_[at].child[side] = mid;
      return set(mid);
    }
    // They part at `shared`: a branch node without a verdict takes both.
    const std::uint32_t branch = make_node(masked(key, shared), shared);
    const std::uint32_t leaf = make_node(key, length);
    nodes_[branch].child[bit_at(key, shared)] = leaf;
    nodes_[branch].child[bit_at(below.key, shared)] = next;
    nodes_[at].child[side] = branch;
    return set(leaf);
  }
}

std::optional<IpPrefixTable::Verdict> IpPrefixTable::find(const IpAddress& ip) const {
  std::optional<Verdict> best;
  if (nodes_.empty()) return best;
  const Bits key = bits_of(ip);
  std::uint32_t at = 0;
  while (at != kNone) {
    const Node& node = nodes_[at];
    const Bits mine = masked(key, node.length);
    if (mine.hi != node.key.hi || mine.lo != node.key.lo) break;
    if (node.has_verdict) best = node.verdict;
    if (node.length == 128) break;
    at = node.child[bit_at(key, node.length)];
  }
  return best;
}

}  // namespace sluice
