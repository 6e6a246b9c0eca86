// Redis server time as this process knows it. Every Redis connection asks
// TIME when it is made and again every few seconds while it carries commands
// (single_node_connect.cpp); the offset between the server's clock and this
// host's system clock is kept here, process-wide, so that what must be said in
// Redis' time (a quota's calendar periods, a decision's deadline) is computed
// on Redis' clock whatever this host's says. Any thread.
#pragma once

#include <cstdint>

namespace sluice::redis {

// This host's system clock, and its steady clock, in microseconds (since the
// epoch; since an unspecified start).
std::int64_t system_clock_us();
std::int64_t steady_clock_us();

// A TIME reply: the server said `server_us`, and the answer came back at
// `received_steady_us` (steady_clock_us()). TIME ran before that, so Redis'
// clock is at least server_us + (steady now - received) from then on: each
// reading is a lower bound, and the estimate is the largest of the last few
// (a reading slowed by a busy Redis does not pull it back). Being on the
// steady clock, it does not move when this host's clock is set. The first
// time this host's clock is found more than a second from Redis', it is
// logged at warn.
void note_server_time(std::int64_t server_us, std::int64_t received_steady_us);

// Redis' time now as this host estimates it (never ahead of it but by Redis'
// own drift, and by the difference between Redis servers whose clocks
// disagree: the estimate follows the fastest); this host's system clock
// until a first reading.
std::int64_t server_now_us();

// This host's clock minus the estimate of Redis' (seconds; positive: this
// host is ahead); 0 until a reading.
double clock_skew_seconds();

// Forgets what was measured (tests).
void reset_server_clock();

}  // namespace sluice::redis
