// A closing client connection lingers: it has sent its last bytes and reads
// (and drops) what the client still sends, so that the client reads the
// reply or GOAWAY rather than a reset, as nginx's lingering close does; for
// this long at most.
#pragma once

#include <chrono>

namespace sluice {

inline constexpr auto kLingerTimeout = std::chrono::seconds(2);

}  // namespace sluice
