// What the Sentinel client reads from sentinels, as pure functions: the
// answer to SENTINEL GET-MASTER-ADDR-BY-NAME, a pub/sub message, and the
// payload of a +switch-master event. No I/O; usable on any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "upstream/redis/options.hpp"
#include "upstream/redis/reply.hpp"

namespace sluice::redis::sentinel {

// The channel a sentinel announces a completed failover on.
inline constexpr std::string_view kSwitchMasterChannel = "+switch-master";

// The answer to SENTINEL GET-MASTER-ADDR-BY-NAME: an address (["ip", "port"]),
// nil when the sentinel monitors no master of that name, or anything else.
enum class MasterAnswer { kAddress, kUnknownMaster, kMalformed };
MasterAnswer parse_master_address(const Reply& reply, Endpoint& address);

// A decimal TCP port 1..65535.
std::optional<std::uint16_t> parse_port(std::string_view text);

// A +switch-master event: "<master name> <old ip> <old port> <new ip> <new port>".
struct SwitchMaster {
  std::string master;
  Endpoint from;
  Endpoint to;
};
std::optional<SwitchMaster> parse_switch_master(std::string_view payload);

}  // namespace sluice::redis::sentinel
