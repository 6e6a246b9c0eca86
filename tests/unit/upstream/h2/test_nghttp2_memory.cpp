// upstream/h2/nghttp2_memory.hpp: nghttp2's allocator over the block cache.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <nghttp2/nghttp2.h>

#include "upstream/h2/nghttp2_memory.hpp"

namespace {

nghttp2_nv nv(std::string_view name, std::string_view value,
              std::uint8_t flags = NGHTTP2_NV_FLAG_NONE) {
  return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
          value.size(), flags};
}

}  // namespace

TEST_CASE("nghttp2 memory: malloc, calloc, realloc and free as nghttp2 uses them", "[h2]") {
  nghttp2_mem* mem = sluice::nghttp2_block_memory();
  // Small and large blocks, aligned as malloc's, holding what was written.
  std::vector<void*> blocks;
  for (std::size_t size : {1, 15, 64, 200, 496, 497, 512, 4000, 70000}) {
    void* p = mem->malloc(size, mem->mem_user_data);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 16 == 0);
    std::memset(p, 0x5a, size);
    blocks.push_back(p);
  }
  for (void* p : blocks) mem->free(p, mem->mem_user_data);
  mem->free(nullptr, mem->mem_user_data);  // as free(NULL)

  auto* zeroed = static_cast<unsigned char*>(mem->calloc(10, 30, mem->mem_user_data));
  REQUIRE(zeroed != nullptr);
  CHECK(std::all_of(zeroed, zeroed + 300, [](unsigned char c) { return c == 0; }));
  // Grown past its size class and into the heap, the bytes come along.
  std::memcpy(zeroed, "header", 6);
  auto* grown = static_cast<char*>(mem->realloc(zeroed, 5000, mem->mem_user_data));
  REQUIRE(grown != nullptr);
  CHECK(std::string(grown, 6) == "header");
  auto* shrunk = static_cast<char*>(mem->realloc(grown, 8, mem->mem_user_data));
  REQUIRE(shrunk != nullptr);
  CHECK(std::string(shrunk, 6) == "header");
  CHECK(mem->realloc(shrunk, 0, mem->mem_user_data) == nullptr);  // freed
  auto* fresh = static_cast<char*>(mem->realloc(nullptr, 32, mem->mem_user_data));
  REQUIRE(fresh != nullptr);
  mem->free(fresh, mem->mem_user_data);
  // An impossible count is refused, not wrapped round.
  CHECK(mem->calloc(static_cast<std::size_t>(-1) / 2, 4, mem->mem_user_data) == nullptr);
}

TEST_CASE("nghttp2 memory: a session made with it runs a request through", "[h2]") {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session* client = nullptr;
  nghttp2_session* server = nullptr;
  REQUIRE(nghttp2_session_client_new3(&client, callbacks, nullptr, nullptr,
                                      sluice::nghttp2_block_memory()) == 0);
  REQUIRE(nghttp2_session_server_new3(&server, callbacks, nullptr, nullptr,
                                      sluice::nghttp2_block_memory()) == 0);
  nghttp2_session_callbacks_del(callbacks);
  nghttp2_submit_settings(client, NGHTTP2_FLAG_NONE, nullptr, 0);
  const nghttp2_nv nva[] = {nv(":method", "GET"), nv(":scheme", "http"), nv(":authority", "a"),
                            nv(":path", "/pkg.Svc/Call"),
                            nv("x-request-id", "0af7651916cd43dd", NGHTTP2_NV_FLAG_NO_INDEX)};
  for (int i = 0; i < 50; ++i) {
    REQUIRE(nghttp2_submit_request(client, nullptr, nva, 5, nullptr, nullptr) > 0);
  }
  std::size_t moved = 0;
  for (;;) {
    const std::uint8_t* data = nullptr;
    const auto n = nghttp2_session_mem_send(client, &data);
    REQUIRE(n >= 0);
    if (n == 0) break;
    REQUIRE(nghttp2_session_mem_recv(server, data, static_cast<std::size_t>(n)) == n);
    moved += static_cast<std::size_t>(n);
  }
  CHECK(moved > 0);
  CHECK(nghttp2_session_get_stream_remote_close(server, 99) == 1);  // the 50th stream, ended
  nghttp2_session_del(client);
  nghttp2_session_del(server);
}
