#include "upstream/balance/maglev.hpp"

#include <algorithm>
#include <stdexcept>

#include "upstream/balance/stable_hash.hpp"

namespace sluice {

MaglevTable::MaglevTable(const std::vector<std::string>& names,
                         const std::vector<unsigned>& weights)
    : entries_(kSize, 0), servers_(names.size()) {
  const std::size_t n = names.size();
  if (n == 0 || weights.size() != n) throw std::invalid_argument("maglev: one weight per server");
  if (n > 0xffff) throw std::invalid_argument("maglev: too many servers");
  std::vector<std::uint64_t> offset(n), skip(n), next(n, 0);
  std::vector<double> credit(n, 0), share(n);
  const unsigned top = *std::max_element(weights.begin(), weights.end());
  for (std::size_t i = 0; i < n; ++i) {
    offset[i] = stable_hash(names[i], 1) % kSize;
    skip[i] = stable_hash(names[i], 2) % (kSize - 1) + 1;
    share[i] = static_cast<double>(std::max(1u, weights[i])) / top;
  }
  std::vector<bool> taken(kSize, false);
  std::size_t filled = 0;
  // Each round, a server earns its share of a turn; with a whole turn it
  // takes the next free entry of its permutation.
  while (filled < kSize) {
    for (std::size_t i = 0; i < n && filled < kSize; ++i) {
      credit[i] += share[i];
      if (credit[i] < 1) continue;
      credit[i] -= 1;
      std::uint64_t slot = (offset[i] + next[i] * skip[i]) % kSize;
      while (taken[slot]) {
        ++next[i];
        slot = (offset[i] + next[i] * skip[i]) % kSize;
      }
      ++next[i];
      taken[slot] = true;
      entries_[slot] = static_cast<std::uint16_t>(i);
      ++filled;
    }
  }
}

std::size_t MaglevTable::lookup(std::uint64_t key, std::size_t round) const {
  if (round == 0) return lookup(key);
  return entries_[mix64(key + round * 0x9e3779b97f4a7c15ULL) % kSize];
}

}  // namespace sluice
