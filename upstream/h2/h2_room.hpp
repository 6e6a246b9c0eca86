// How many streams an HTTP/2 connection to an upstream takes, from what it
// knows of the server. Pure; asked by H2Connection.
//
// A server may take a single stream at a time, and says how many only in its
// SETTINGS, which come a round trip after the connection is made. Until then
// one stream is sent, and the others opened on the connection wait in it (up
// to kStreamsBeforeSettings in all); once the SETTINGS are known, at most
// SETTINGS_MAX_CONCURRENT_STREAMS streams are open at once, and those that
// waited beyond it are placed elsewhere. Sending them all at once would have
// the server refuse those beyond its limit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice {

struct H2Room {
  bool settings_known = false;    // the server's SETTINGS arrived
  std::uint32_t max_streams = 0;  // its SETTINGS_MAX_CONCURRENT_STREAMS, once known
  std::size_t sent = 0;           // streams sent and not closed
  std::size_t queued = 0;         // streams waiting for the SETTINGS
};

// The streams a connection takes before its server's SETTINGS (one sent, the
// others waiting for them).
inline constexpr std::size_t kStreamsBeforeSettings = 100;

// How many more streams may be sent now.
inline std::size_t h2_sendable(const H2Room& r) {
  if (!r.settings_known) return r.sent == 0 ? 1 : 0;
  return r.sent < r.max_streams ? r.max_streams - r.sent : 0;
}

// Whether one more stream may be opened on the connection, to be sent now or
// to wait for the SETTINGS.
inline bool h2_takes_stream(const H2Room& r) {
  if (!r.settings_known) return r.sent + r.queued < kStreamsBeforeSettings;
  return r.queued == 0 && h2_sendable(r) > 0;
}

}  // namespace sluice
