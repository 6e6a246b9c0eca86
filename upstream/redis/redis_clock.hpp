// Redis server time as this process knows it. Every Redis connection asks
// TIME when it is made and again every few seconds while it carries commands
// (single_node_connect.cpp); the offset between the server's clock and this
// host's system clock is kept here, process-wide, so that what must be said in
// Redis' time (a quota's calendar periods, a decision's deadline) is computed
// on Redis' clock whatever this host's says. Any thread.
#pragma once

#include <cstdint>

namespace sluice::redis {

// This host's system clock, in microseconds since the epoch.
std::int64_t system_clock_us();

// A TIME reply: the server said `server_us` to a command sent at `sent_us`
// and answered at `received_us` (this host's clock). The server's clock is
// taken to be `server_us` halfway between the two. The first time this host's
// clock is found more than a second from Redis', it is logged at warn.
void note_server_time(std::int64_t server_us, std::int64_t sent_us, std::int64_t received_us);

// Redis' time now as this host estimates it: its system clock moved by the
// last offset measured (not moved until one is).
std::int64_t server_now_us();

// This host's clock minus Redis' (seconds; positive: this host is ahead), as
// last measured; 0 until a measurement.
double clock_skew_seconds();

// Forgets what was measured (tests).
void reset_server_clock();

}  // namespace sluice::redis
