#include "upstream/redis/client.hpp"

namespace sluice::redis {

std::string_view to_string(State state) noexcept {
  switch (state) {
    case State::kDisconnected:
      return "disconnected";
    case State::kConnecting:
      return "connecting";
    case State::kAuthenticating:
      return "authenticating";
    case State::kReady:
      return "ready";
    case State::kBackoff:
      return "backoff";
    case State::kClosed:
      return "closed";
  }
  return "unknown";
}

}  // namespace sluice::redis
