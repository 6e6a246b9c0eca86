// Which primary owns each of the 16384 slots of a Redis Cluster, learned from
// a node's CLUSTER SHARDS or CLUSTER SLOTS reply and corrected by MOVED
// redirects. A slot may have no owner (not assigned, owner failed, or its
// address unknown): commands for it fail as a Redis failure. Pure: parsing
// and lookups only, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "upstream/redis/reply.hpp"

namespace sluice::redis::cluster {

struct NodeAddress {
  std::string host;
  std::uint16_t port = 0;
  bool operator==(const NodeAddress&) const = default;
};

class SlotMap {
 public:
  SlotMap();

  // From the reply to CLUSTER SHARDS (Redis 7) or CLUSTER SLOTS, sent to the
  // node at `answering_host` (used where a node reports an empty address).
  // With `tls`, CLUSTER SHARDS' "tls-port" is used where given. nullopt and
  // `error` set when the reply is not such a reply (an error reply, a node
  // that is not in cluster mode, garbage).
  static std::optional<SlotMap> from_shards(const Reply& reply, std::string_view answering_host,
                                            bool tls, std::string& error);
  static std::optional<SlotMap> from_slots(const Reply& reply, std::string_view answering_host,
                                           std::string& error);

  // The owner of `slot`, or nullptr.
  const NodeAddress* owner(std::uint16_t slot) const;
  // After a MOVED: `slot` now belongs to `node`.
  void move(std::uint16_t slot, const NodeAddress& node);
  // Every primary that owns at least one slot, in first-slot order.
  std::vector<NodeAddress> primaries() const;
  // Slots without an owner.
  std::size_t unowned_slots() const;

 private:
  static constexpr std::uint16_t kNone = 0xffff;
  void assign(std::uint16_t first, std::uint16_t last, const NodeAddress& node);
  std::uint16_t index_of(const NodeAddress& node);

  std::vector<std::uint16_t> owner_;  // per slot: index into nodes_, or kNone
  std::vector<NodeAddress> nodes_;
};

}  // namespace sluice::redis::cluster
