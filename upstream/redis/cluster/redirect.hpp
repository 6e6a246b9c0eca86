// The Redis Cluster error replies that say where a command should have gone
// or that it should be tried again: "MOVED <slot> <host>:<port>",
// "ASK <slot> <host>:<port>", "TRYAGAIN ..." and "CLUSTERDOWN ...", parsed
// from the text of an error reply. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

}  // namespace sluice::redis::cluster
