// A 64-bit hash that is the same on every machine and every run (FNV-1a,
// then a finalizer that spreads its bits): what consistent hashing keys
// servers and requests with, so that every Sluice of a fleet sends a key to
// the same server. std::hash promises neither.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice {

constexpr std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// A uniformly random 64-bit `draw` scaled to [0, bound): the high half of
// their 128-bit product (Lemire), no division, a bias below one part in
// 2^64 / bound.
__extension__ typedef unsigned __int128 uint128_for_scaling;
constexpr std::uint64_t scale_draw(std::uint64_t draw, std::uint64_t bound) {
  return static_cast<std::uint64_t>((static_cast<uint128_for_scaling>(draw) * bound) >> 64);
}

constexpr std::uint64_t stable_hash(std::string_view text, std::uint64_t seed = 0) {
  std::uint64_t h = 0xcbf29ce484222325ULL ^ mix64(seed);
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return mix64(h);
}

}  // namespace sluice
