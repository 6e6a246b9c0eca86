// How many streams an HTTP/2 connection to an upstream takes: one until the
// server's SETTINGS are known (the others wait in it), then the server's limit.
#include <catch2/catch.hpp>

#include "upstream/h2/h2_room.hpp"

using namespace sluice;

TEST_CASE("before the server's SETTINGS one stream is sent and the others wait", "[h2_room]") {
  H2Room r;  // a new connection: nothing known of the server yet
  CHECK(h2_sendable(r) == 1);
  CHECK(h2_takes_stream(r));
  r.sent = 1;
  CHECK(h2_sendable(r) == 0);  // the next ones wait for the SETTINGS
  r.queued = 5;
  CHECK(h2_takes_stream(r));
  r.queued = kStreamsBeforeSettings - 1;  // with the one sent: as many as it holds
  CHECK_FALSE(h2_takes_stream(r));
  r.sent = 0;  // the one sent ended first: the next one goes
  CHECK(h2_sendable(r) == 1);
}

TEST_CASE("once the SETTINGS are known the server's limit bounds the streams", "[h2_room]") {
  H2Room r{.settings_known = true, .max_streams = 1, .sent = 0, .queued = 0};
  CHECK(h2_sendable(r) == 1);
  CHECK(h2_takes_stream(r));
  r.sent = 1;
  CHECK(h2_sendable(r) == 0);
  CHECK_FALSE(h2_takes_stream(r));
  r.max_streams = 100;
  CHECK(h2_sendable(r) == 99);
  CHECK(h2_takes_stream(r));
  r.sent = 120;  // the server lowered its limit under open streams
  CHECK(h2_sendable(r) == 0);
  CHECK_FALSE(h2_takes_stream(r));
  r = {.settings_known = true, .max_streams = 0, .sent = 0, .queued = 0};  // takes none now
  CHECK(h2_sendable(r) == 0);
  CHECK_FALSE(h2_takes_stream(r));
}
