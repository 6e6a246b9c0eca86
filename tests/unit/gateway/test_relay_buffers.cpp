// A worker's relay buffers: a steady number in flight reuses the same
// buffers, a burst's leftovers are freed only after a whole period unused,
// and never below the always-kept few.
#include <catch2/catch.hpp>

#include <cstddef>
#include <memory>
#include <set>
#include <vector>

#include "gateway/relay_buffers.hpp"

using namespace sluice;

namespace {

// Takes `n` buffers; their addresses go to `seen` when given.
std::vector<std::unique_ptr<char[]>> take(RelayBuffers& pool, std::size_t n,
                                          std::set<const char*>* seen = nullptr) {
  std::vector<std::unique_ptr<char[]>> out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(pool.take());
    if (seen) seen->insert(out.back().get());
  }
  return out;
}

void give_back(RelayBuffers& pool, std::vector<std::unique_ptr<char[]>>& buffers) {
  for (auto& b : buffers) pool.give_back(std::move(b));
  buffers.clear();
}

}  // namespace

TEST_CASE("relay buffers: a steady load far above the always-kept few allocates none",
          "[relay_buffers]") {
  RelayBuffers pool;
  const std::size_t in_flight = RelayBuffers::kAlwaysKept * 10;
  std::set<const char*> first;
  auto out = take(pool, in_flight, &first);
  give_back(pool, out);
  CHECK(pool.kept() == in_flight);
  // The number in flight swings between half and all: every buffer is one made before.
  std::set<const char*> later;
  for (int round = 0; round < 20; ++round) {
    auto most = take(pool, round % 2 ? in_flight : in_flight / 2, &later);
    give_back(pool, most);
    if (round % 5 == 4) CHECK(pool.age() == 0);  // all were needed within each period
  }
  for (const char* p : later) CHECK(first.count(p) == 1);
  CHECK(pool.kept() == in_flight);
}

TEST_CASE("relay buffers: a burst's leftovers go after a whole period unused, down to the few",
          "[relay_buffers]") {
  RelayBuffers pool;
  auto out = take(pool, 200);
  give_back(pool, out);
  CHECK(pool.age() == 0);  // the period of the burst itself: all were out at once
  // A quieter period: at most 50 out at once, so 150 sat unused throughout.
  out = take(pool, 50);
  give_back(pool, out);
  CHECK(pool.age() == 150 * RelayBuffers::kBytes);
  CHECK(pool.kept() == 50);
  // Idle from now on: down to the always-kept few, and no further.
  CHECK(pool.age() == (50 - RelayBuffers::kAlwaysKept) * RelayBuffers::kBytes);
  CHECK(pool.kept() == RelayBuffers::kAlwaysKept);
  CHECK(pool.age() == 0);
  CHECK(pool.kept() == RelayBuffers::kAlwaysKept);
}

TEST_CASE("relay buffers: a buffer out when the period ends is not counted unused",
          "[relay_buffers]") {
  RelayBuffers pool;
  auto out = take(pool, 100);
  give_back(pool, out);
  pool.age();
  auto held = take(pool, 100);  // all out across the period's end
  CHECK(pool.age() == 0);
  give_back(pool, held);
  CHECK(pool.kept() == 100);
  CHECK(pool.age() == 0);  // none was kept unused for the whole period: they were out
  CHECK(pool.age() == (100 - RelayBuffers::kAlwaysKept) * RelayBuffers::kBytes);
}
