// Framing decisions: relayed pieces, response framing towards the client,
// relayable response codings, and the keep-alive decision.
#include <catch2/catch.hpp>

#include <string>

#include <boost/beast/http/fields.hpp>

#include "upstream/exchange/framing.hpp"

namespace http = boost::beast::http;
using namespace sluice;

namespace {

// What a gather-write of the first `count` buffers puts on the wire.
std::string wire(const PieceBuffers& buffers, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) {
    out.append(static_cast<const char*>(buffers[i].data()), buffers[i].size());
  }
  return out;
}

}  // namespace

TEST_CASE("a relayed piece: head once, then raw or chunked bytes", "[framing]") {
  PieceBuffers buffers;
  ChunkPrefix prefix;
  const std::string body(300, 'x');

  auto n = frame_piece(buffers, "HEAD\r\n\r\n", nullptr, 0, false, false, prefix);
  CHECK(wire(buffers, n) == "HEAD\r\n\r\n");

  n = frame_piece(buffers, "H\r\n\r\n", body.data(), 3, false, true, prefix);
  CHECK(wire(buffers, n) == "H\r\n\r\nxxx");

  n = frame_piece(buffers, "", body.data(), body.size(), true, false, prefix);
  CHECK(wire(buffers, n) == "12c\r\n" + body + "\r\n");

  n = frame_piece(buffers, "H\r\n\r\n", body.data(), 16, true, true, prefix);
  CHECK(wire(buffers, n) == "H\r\n\r\n10\r\n" + body.substr(0, 16) + "\r\n0\r\n\r\n");
  CHECK(n == 5);

  SECTION("an empty last piece is only the last chunk") {
    n = frame_piece(buffers, "", nullptr, 0, true, true, prefix);
    CHECK(wire(buffers, n) == "0\r\n\r\n");
  }
  SECTION("an empty piece that is not last writes nothing") {
    CHECK(frame_piece(buffers, "", nullptr, 0, true, false, prefix) == 0);
  }
}

TEST_CASE("response framing towards the client", "[framing]") {
  SECTION("Content-Length passes through") {
    auto f = frame_response(true, true, true);
    CHECK_FALSE(f.chunked);
    CHECK_FALSE(f.ends_with_close);
    f = frame_response(true, true, false);
    CHECK_FALSE(f.chunked);
    CHECK_FALSE(f.ends_with_close);
  }
  SECTION("no body: nothing to frame") {
    auto f = frame_response(false, false, false);
    CHECK_FALSE(f.chunked);
    CHECK_FALSE(f.ends_with_close);
  }
  SECTION("unknown length: chunked for HTTP/1.1, the close for HTTP/1.0") {
    auto f = frame_response(true, false, true);
    CHECK(f.chunked);
    CHECK_FALSE(f.ends_with_close);
    f = frame_response(true, false, false);
    CHECK_FALSE(f.chunked);
    CHECK(f.ends_with_close);
  }
}

TEST_CASE("only chunked, once, is a relayable response coding", "[framing]") {
  sluice::HttpFields f;
  CHECK(relayable_transfer_coding(f));
  f.set(http::field::transfer_encoding, " Chunked\t");
  CHECK(relayable_transfer_coding(f));
  f.set(http::field::transfer_encoding, "gzip, chunked");
  CHECK_FALSE(relayable_transfer_coding(f));
  f.set(http::field::transfer_encoding, "chunked");
  f.insert(http::field::transfer_encoding, "chunked");
  CHECK_FALSE(relayable_transfer_coding(f));
}

TEST_CASE("the keep-alive decision", "[framing]") {
  CHECK(keep_client_alive({.client_asked = true}));
  CHECK_FALSE(keep_client_alive({}));
  CHECK_FALSE(keep_client_alive({.client_asked = true, .draining = true}));
  CHECK_FALSE(keep_client_alive({.client_asked = true, .must_close = true}));
  CHECK_FALSE(keep_client_alive({.client_asked = true, .ends_with_close = true}));
}

TEST_CASE("an upstream connection is pooled only after a complete keep-alive exchange",
          "[framing]") {
  const UpstreamReuseFacts complete{.upstream_keep_alive = true,
                                    .response_done = true,
                                    .request_done = true,
                                    .nothing_buffered = true};
  CHECK(reuse_upstream(complete));
  auto f = complete;
  f.upstream_keep_alive = false;
  CHECK_FALSE(reuse_upstream(f));
  f = complete;
  f.response_done = false;
  CHECK_FALSE(reuse_upstream(f));
  f = complete;
  f.request_done = false;
  CHECK_FALSE(reuse_upstream(f));
  f = complete;
  f.nothing_buffered = false;
  CHECK_FALSE(reuse_upstream(f));
  f = complete;
  f.upgrade_asked = true;  // a refused WebSocket handshake
  CHECK_FALSE(reuse_upstream(f));
}
