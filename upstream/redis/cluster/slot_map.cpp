#include "upstream/redis/cluster/slot_map.hpp"

#include <algorithm>

#include "upstream/redis/cluster/slot.hpp"

namespace sluice::redis::cluster {
namespace {

using Type = Reply::Type;

bool is_text(const Reply& r) { return r.type == Type::kString || r.type == Type::kStatus; }

std::optional<std::uint16_t> slot_number(const Reply& r) {
  if (r.type != Type::kInteger || r.integer < 0 || r.integer >= kSlotCount) return std::nullopt;
  return static_cast<std::uint16_t>(r.integer);
}

std::optional<std::uint16_t> port_number(const Reply& r) {
  if (r.type != Type::kInteger || r.integer <= 0 || r.integer > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(r.integer);
}

// A node's reported address: empty means "the node you asked"; "?" means
// unknown (no owner can be reached through it).
std::optional<std::string> node_host(std::string_view reported, std::string_view answering_host) {
  if (reported == "?") return std::nullopt;
  return std::string(reported.empty() ? answering_host : reported);
}

// The value under `key` in a RESP2 map (a flat array of key, value, ...).
const Reply* field(const Reply& map, std::string_view key) {
  if (map.type != Type::kArray) return nullptr;
  for (std::size_t i = 0; i + 1 < map.elements.size(); i += 2) {
    if (is_text(map.elements[i]) && map.elements[i].str == key) return &map.elements[i + 1];
  }
  return nullptr;
}

std::string reply_error(const Reply& reply, std::string_view command) {
  if (reply.is_error()) return std::string(command) + " failed: " + reply.str;
  return std::string(command) + " gave an unexpected reply";
}

// The primary of one CLUSTER SHARDS shard, if it is online and has an address.
std::optional<NodeAddress> shard_primary(const Reply& nodes, std::string_view answering_host,
                                         bool tls) {
  if (nodes.type != Type::kArray) return std::nullopt;
  for (const Reply& node : nodes.elements) {
    const Reply* role = field(node, "role");
    const Reply* health = field(node, "health");
    if (!role || !is_text(*role) || role->str != "master") continue;
    if (health && is_text(*health) && health->str != "online") return std::nullopt;
    const Reply* endpoint = field(node, "endpoint");
    const Reply* ip = field(node, "ip");
    const Reply* host = endpoint && is_text(*endpoint) ? endpoint : ip;
    const Reply* port = tls && field(node, "tls-port") ? field(node, "tls-port") : field(node, "port");
    if (!host || !is_text(*host) || !port) return std::nullopt;
    auto name = node_host(host->str, answering_host);
    auto number = port_number(*port);
    if (!name || !number) return std::nullopt;
    return NodeAddress{std::move(*name), *number};
  }
  return std::nullopt;
}

}  // namespace

SlotMap::SlotMap() : owner_(kSlotCount, kNone) {}

std::optional<SlotMap> SlotMap::from_shards(const Reply& reply, std::string_view answering_host,
                                            bool tls, std::string& error) {
  if (reply.type != Type::kArray) {
    error = reply_error(reply, "CLUSTER SHARDS");
    return std::nullopt;
  }
  SlotMap map;
  for (const Reply& shard : reply.elements) {
    const Reply* slots = field(shard, "slots");
    const Reply* nodes = field(shard, "nodes");
    if (!slots || !nodes || slots->type != Type::kArray || slots->elements.size() % 2 != 0) {
      error = reply_error(reply, "CLUSTER SHARDS");
      return std::nullopt;
    }
    const auto primary = shard_primary(*nodes, answering_host, tls);
    for (std::size_t i = 0; i < slots->elements.size(); i += 2) {
      const auto first = slot_number(slots->elements[i]);
      const auto last = slot_number(slots->elements[i + 1]);
      if (!first || !last || *first > *last) {
        error = reply_error(reply, "CLUSTER SHARDS");
        return std::nullopt;
      }
      if (primary) map.assign(*first, *last, *primary);
    }
  }
  return map;
}

std::optional<SlotMap> SlotMap::from_slots(const Reply& reply, std::string_view answering_host,
                                           std::string& error) {
  if (reply.type != Type::kArray) {
    error = reply_error(reply, "CLUSTER SLOTS");
    return std::nullopt;
  }
  SlotMap map;
  for (const Reply& range : reply.elements) {
    // [first, last, [host, port, id, ...] of the primary, replicas...]
    if (range.type != Type::kArray || range.elements.size() < 3 ||
        range.elements[2].type != Type::kArray || range.elements[2].elements.size() < 2) {
      error = reply_error(reply, "CLUSTER SLOTS");
      return std::nullopt;
    }
    const auto first = slot_number(range.elements[0]);
    const auto last = slot_number(range.elements[1]);
    const Reply& host = range.elements[2].elements[0];
    const auto port = port_number(range.elements[2].elements[1]);
    if (!first || !last || *first > *last || !(is_text(host) || host.is_nil()) || !port) {
      error = reply_error(reply, "CLUSTER SLOTS");
      return std::nullopt;
    }
    // A nil host is an unknown endpoint, like "?".
    const auto name = host.is_nil() ? std::nullopt : node_host(host.str, answering_host);
    if (name) map.assign(*first, *last, NodeAddress{*name, *port});
  }
  return map;
}

const NodeAddress* SlotMap::owner(std::uint16_t slot) const {
  if (slot >= kSlotCount || owner_[slot] == kNone) return nullptr;
  return &nodes_[owner_[slot]];
}

void SlotMap::move(std::uint16_t slot, const NodeAddress& node) {
  if (slot < kSlotCount) assign(slot, slot, node);
}

std::vector<NodeAddress> SlotMap::primaries() const {
  std::vector<NodeAddress> out;
  std::vector<bool> seen(nodes_.size(), false);
  for (const std::uint16_t index : owner_) {
    if (index == kNone || seen[index]) continue;
    seen[index] = true;
    out.push_back(nodes_[index]);
  }
  return out;
}

std::size_t SlotMap::unowned_slots() const {
  return static_cast<std::size_t>(std::count(owner_.begin(), owner_.end(), kNone));
}

void SlotMap::assign(std::uint16_t first, std::uint16_t last, const NodeAddress& node) {
  const std::uint16_t index = index_of(node);
  std::fill(owner_.begin() + first, owner_.begin() + last + 1, index);
}

std::uint16_t SlotMap::index_of(const NodeAddress& node) {
  const auto it = std::find(nodes_.begin(), nodes_.end(), node);
  if (it != nodes_.end()) return static_cast<std::uint16_t>(it - nodes_.begin());
  // Nodes that own no slot any more are dropped before the list outgrows the
  // slots, so that redirects to ever new addresses cannot grow it without end.
  if (nodes_.size() >= kSlotCount) {
    std::vector<NodeAddress> kept;
    std::vector<std::uint16_t> renumbered(nodes_.size(), kNone);
    for (std::uint16_t& index : owner_) {
      if (index == kNone) continue;
      if (renumbered[index] == kNone) {
        renumbered[index] = static_cast<std::uint16_t>(kept.size());
        kept.push_back(std::move(nodes_[index]));
      }
      index = renumbered[index];
    }
    nodes_ = std::move(kept);
  }
  nodes_.push_back(node);
  return static_cast<std::uint16_t>(nodes_.size() - 1);
}

}  // namespace sluice::redis::cluster
