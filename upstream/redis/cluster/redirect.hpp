// The Redis Cluster error replies that say where a command should have gone
// or that it should be tried again: "MOVED <slot> <host>:<port>",
// "ASK <slot> <host>:<port>", "TRYAGAIN ..." and "CLUSTERDOWN ...", parsed
// from the text of an error reply, and what a cluster client does next with
// a reply to a command it routed by slot. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "upstream/redis/cluster/slot_map.hpp"

namespace sluice::redis::cluster {

struct Redirect {
  enum class Kind {
    kMoved,        // the slot has a new owner: update the map, resend there
    kAsk,          // the slot is migrating: ASKING + resend there, once
    kTryAgain,     // a multi-key command during a migration: resend later
    kClusterDown,  // the cluster cannot serve the slot now
  };
  Kind kind = Kind::kMoved;
  std::uint16_t slot = 0;  // kMoved and kAsk
  // kMoved and kAsk. An empty host means the host of the node that answered
  // (a node that does not know its own address says ":port").
  std::string host;
  std::uint16_t port = 0;
};

// The redirect an error reply's text names; nullopt for any other error,
// including a MOVED or ASK whose slot or address does not parse.
std::optional<Redirect> parse_redirect(std::string_view error);

// How many times one command may be sent again (MOVED, ASK, TRYAGAIN
// together) before its last reply is taken as the answer.
inline constexpr unsigned kMaxRedirects = 5;

// What to do with the reply to a routed command.
struct NextStep {
  enum class Kind {
    kComplete,     // hand the reply to the caller as it is
    kFollowMoved,  // update the map (slot -> target) and send to target
    kFollowAsk,    // send ASKING + the command to target, once
    kRetryLater,   // TRYAGAIN: send again to the slot's owner after a pause
    kClusterDown,  // complete with the error and refresh the map
  };
  Kind kind = Kind::kComplete;
  std::uint16_t slot = 0;  // kFollowMoved
  NodeAddress target;      // kFollowMoved and kFollowAsk
};

// `error_text` is the text of an error reply (is_error false: any other
// reply); `answering_host` the host of the node that sent it (a redirect
// with an empty host means that one); `resends` how often the command was
// already sent again.
NextStep next_step(bool is_error, std::string_view error_text, std::string_view answering_host,
                   unsigned resends);

}  // namespace sluice::redis::cluster
