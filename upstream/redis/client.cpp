#include "upstream/redis/client.hpp"

#include "upstream/upstream_config.hpp"

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

Stats& Stats::operator+=(const Stats& o) {
  commands_sent += o.commands_sent;
  writes += o.writes;
  replies += o.replies;
  timeouts += o.timeouts;
  late_replies += o.late_replies;
  not_connected += o.not_connected;
  server_errors += o.server_errors;
  noscript_retries += o.noscript_retries;
  connects += o.connects;
  connect_failures += o.connect_failures;
  reconnects += o.reconnects;
  protocol_errors += o.protocol_errors;
  redirects_moved += o.redirects_moved;
  redirects_ask += o.redirects_ask;
  topology_refresh_ok += o.topology_refresh_ok;
  topology_refresh_error += o.topology_refresh_error;
  topology_changes += o.topology_changes;
  return *this;
}

std::string format_address(std::string_view host, std::uint16_t port) {
  return HostPort{std::string(host), port}.to_string();
}

}  // namespace sluice::redis
