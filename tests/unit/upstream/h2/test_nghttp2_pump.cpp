#include <catch2/catch.hpp>

#include <cstring>
#include <string_view>

#include <nghttp2/nghttp2.h>

#include "upstream/h2/nghttp2_pump.hpp"

using namespace sluice;

namespace {

constexpr std::string_view kClientMagic = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// A client and a server session; the server's frame callback notes whether
// the server's pump was inside receive() when nghttp2 called back.
struct Pair {
  Nghttp2Pump client_pump;
  Nghttp2Pump server_pump;
  nghttp2_session* client = nullptr;
  nghttp2_session* server = nullptr;
  int frames_seen = 0;
  bool every_frame_inside_receive = true;

  Pair() {
    nghttp2_session_callbacks* callbacks = nullptr;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_client_new(&client, callbacks, this);
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        callbacks, [](nghttp2_session*, const nghttp2_frame*, void* user) {
          auto& self = *static_cast<Pair*>(user);
          ++self.frames_seen;
          self.every_frame_inside_receive &= self.server_pump.receiving();
          return 0;
        });
    nghttp2_session_server_new(&server, callbacks, this);
    nghttp2_session_callbacks_del(callbacks);
  }
  ~Pair() {
    nghttp2_session_del(client);
    nghttp2_session_del(server);
  }
};

std::span<const std::uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

}  // namespace

TEST_CASE("pump: what nghttp2 has to send is gathered, written once, and emptied", "[h2]") {
  Pair pair;
  nghttp2_submit_settings(pair.client, NGHTTP2_FLAG_NONE, nullptr, 0);
  REQUIRE(pair.client_pump.can_send());
  REQUIRE(pair.client_pump.gather(pair.client) == 0);
  const std::string& out = pair.client_pump.pending();
  REQUIRE(out.size() > kClientMagic.size());
  CHECK(std::string_view(out).substr(0, kClientMagic.size()) == kClientMagic);

  const auto generation = pair.client_pump.start_write();
  CHECK(pair.client_pump.writing());
  CHECK_FALSE(pair.client_pump.can_send());
  CHECK(pair.client_pump.stalled(generation));

  // The server reads it: its callbacks run inside receive().
  const auto wrote = pair.client_pump.pending();
  CHECK(pair.server_pump.receive(pair.server, bytes_of(wrote)) ==
        static_cast<ssize_t>(wrote.size()));
  CHECK(pair.frames_seen == 1);  // the SETTINGS
  CHECK(pair.every_frame_inside_receive);
  CHECK_FALSE(pair.server_pump.receiving());

  pair.client_pump.write_done();
  CHECK(pair.client_pump.pending().empty());
  CHECK_FALSE(pair.client_pump.stalled(generation));  // that write's timer does nothing now
  CHECK(pair.client_pump.can_send());
  REQUIRE(pair.client_pump.gather(pair.client) == 0);
  CHECK(pair.client_pump.pending().empty());  // nothing more to say
}

TEST_CASE("pump: one write gathers at most kMaxPendingOut (and a frame), the rest next time",
          "[h2]") {
  Pair pair;
  nghttp2_submit_settings(pair.client, NGHTTP2_FLAG_NONE, nullptr, 0);
  const std::size_t pings = 3 * Nghttp2Pump::kMaxPendingOut / 17;  // a PING frame is 17 bytes
  for (std::size_t i = 0; i < pings; ++i)
    nghttp2_submit_ping(pair.client, NGHTTP2_FLAG_NONE, nullptr);

  std::size_t total = 0;
  int writes = 0;
  while (true) {
    REQUIRE(pair.client_pump.gather(pair.client) == 0);
    const auto size = pair.client_pump.pending().size();
    if (size == 0) break;
    CHECK(size < Nghttp2Pump::kMaxPendingOut + 64);
    if (pair.client_pump.full()) CHECK(nghttp2_session_want_write(pair.client) != 0);
    total += size;
    ++writes;
    pair.client_pump.start_write();
    pair.client_pump.write_done();
  }
  CHECK(writes >= 3);
  CHECK(total >= pings * 17);
}

TEST_CASE("pump: bytes nghttp2 refuses are its error, and receive() ends all the same", "[h2]") {
  Pair pair;
  const std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(pair.server_pump.receive(pair.server, bytes_of(garbage)) == NGHTTP2_ERR_BAD_CLIENT_MAGIC);
  CHECK_FALSE(pair.server_pump.receiving());
  CHECK(pair.server_pump.read_buffer().size() == Nghttp2Pump::kReadBytes);
}
