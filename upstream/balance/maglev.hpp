// Maglev consistent hashing (Eisenbud et al., NSDI 2016): a lookup table of
// a prime size in which each server holds a share of the entries in
// proportion to its weight, filled from per-server permutations so that
// adding or removing one of N servers moves about 1/N of the keys. Built
// once per configuration (immutable, shared by the workers); a lookup is one
// index. Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

class MaglevTable {
 public:
  // The table size: a prime well above the server count (each server's
  // share is then exact to within a fraction of a percent).
  static constexpr std::size_t kSize = 65537;

  // `names` identify the servers (the same name hashes the same in every
  // process); `weights` (same length, each at least 1) their shares.
  MaglevTable(const std::vector<std::string>& names, const std::vector<unsigned>& weights);

  // The server of `key`.
  std::size_t lookup(std::uint64_t key) const { return entries_[key % kSize]; }
  // The server of `key` for its `round`-th choice (round 0: lookup): a
  // key whose server cannot take it goes to the next round's, which
  // differs for each key, so a missing server's keys spread over the rest
  // by their weights while every other key stays where it was.
  std::size_t lookup(std::uint64_t key, std::size_t round) const;
  std::size_t servers() const { return servers_; }

 private:
  std::vector<std::uint16_t> entries_;
  std::size_t servers_ = 0;
};

}  // namespace sluice
