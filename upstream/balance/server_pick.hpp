// Choosing one of an upstream's servers (upstreams.NAME.balance), pure: the
// caller says which servers may take the request (not tried for it yet, not
// in cool-down, healthy, not ejected), and keeps the state each policy
// needs between requests (one per worker, so none of it is shared).
//
// - round_robin: nginx's smooth weighted round robin: over every sum of the
//   weights' picks each server is chosen its weight's times, interleaved
//   (weights 5, 1, 1 give a a b a c a a, not a a a a a b c).
// - least_request: two usable servers drawn at random (by weight), the one
//   with fewer requests in flight per weight taken (Envoy's power of two
//   choices): a slow server collects its requests and is then passed over.
// - random: one usable server drawn by weight.
// - hash: the request's key through the consistent table (maglev.hpp); a
//   server that cannot take it passes the key on to the key's next choice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace sluice {

class MaglevTable;

enum class BalancePolicy { kRoundRobin, kLeastRequest, kRandom, kHash };

// A small fast generator (splitmix64), one per worker: draws need no quality
// beyond spreading.
class PickRandom {
 public:
  explicit PickRandom(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  // Uniform in [0, bound) (bound > 0).
  std::uint64_t below(std::uint64_t bound);

 private:
  std::uint64_t state_;
};

// What the picks read of each server.
struct PickServer {
  bool usable = false;
  unsigned weight = 1;
  std::size_t in_flight = 0;  // least_request: this worker's requests at it
};

// `current`: the smooth round robin's running weights, one per server (the
// caller's state, sized like `servers`).
std::optional<std::size_t> pick_round_robin(std::span<const PickServer> servers,
                                            std::vector<std::int64_t>& current);
std::optional<std::size_t> pick_least_request(std::span<const PickServer> servers,
                                              PickRandom& random);
std::optional<std::size_t> pick_random(std::span<const PickServer> servers, PickRandom& random);
std::optional<std::size_t> pick_hash(std::span<const PickServer> servers, const MaglevTable& table,
                                     std::uint64_t key);

}  // namespace sluice
