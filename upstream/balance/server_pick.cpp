#include "upstream/balance/server_pick.hpp"

#include "upstream/balance/maglev.hpp"
#include "upstream/balance/stable_hash.hpp"

namespace sluice {

std::uint64_t PickRandom::next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  return mix64(state_);
}

std::uint64_t PickRandom::below(std::uint64_t bound) {
  return scale_draw(next(), bound);
}

std::optional<std::size_t> pick_round_robin(std::span<const PickServer> servers,
                                            std::vector<std::int64_t>& current) {
  if (current.size() != servers.size()) current.assign(servers.size(), 0);
  std::int64_t total = 0;
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    if (!servers[i].usable) continue;
    current[i] += servers[i].weight;
    total += servers[i].weight;
    if (!best || current[i] > current[*best]) best = i;
  }
  if (best) current[*best] -= total;
  return best;
}

namespace {

// A usable server drawn by weight, leaving out `except` (none: npos).
std::optional<std::size_t> draw(std::span<const PickServer> servers, PickRandom& random,
                                std::size_t except = static_cast<std::size_t>(-1)) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    if (servers[i].usable && i != except) total += servers[i].weight;
  }
  if (total == 0) return std::nullopt;
  std::uint64_t at = random.below(total);
  for (std::size_t i = 0; i < servers.size(); ++i) {
    if (!servers[i].usable || i == except) continue;
    if (at < servers[i].weight) return i;
    at -= servers[i].weight;
  }
  return std::nullopt;  // not reached
}

}  // namespace

std::optional<std::size_t> pick_least_request(std::span<const PickServer> servers,
                                              PickRandom& random) {
  const auto a = draw(servers, random);
  if (!a) return std::nullopt;
  const auto b = draw(servers, random, *a);
  if (!b) return a;
  // Fewer requests in flight per unit of weight: (n + 1) / w, compared
  // without dividing. A tie goes to the first drawn (itself random).
  const auto load = [&](std::size_t i, std::size_t other) {
    // At most 2^32 requests in flight times a weight of at most 1000: no overflow.
    return static_cast<std::uint64_t>(servers[i].in_flight + 1) * servers[other].weight;
  };
  return load(*b, *a) < load(*a, *b) ? b : a;
}

std::optional<std::size_t> pick_random(std::span<const PickServer> servers, PickRandom& random) {
  return draw(servers, random);
}

std::optional<std::size_t> pick_hash(std::span<const PickServer> servers, const MaglevTable& table,
                                     std::uint64_t key) {
  if (table.servers() != servers.size()) return std::nullopt;
  // Enough rounds to find any usable server with near certainty; after
  // them, the first usable one in order (a key then still has one home).
  const std::size_t rounds = 4 * servers.size() + 16;
  for (std::size_t round = 0; round < rounds; ++round) {
    const std::size_t i = table.lookup(key, round);
    if (servers[i].usable) return i;
  }
  for (std::size_t i = 0; i < servers.size(); ++i) {
    if (servers[i].usable) return i;
  }
  return std::nullopt;
}

}  // namespace sluice
