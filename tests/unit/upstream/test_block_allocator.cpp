// The per-thread block cache: a freed block comes back for the next
// allocation of its size class, small (up to 512 bytes) and large (up to 4
// KiB: an HTTP/2 stream's state).
#include <catch2/catch.hpp>

#include <cstddef>
#include <memory>

#include "upstream/block_allocator.hpp"

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kKeeps = false;  // under AddressSanitizer every block goes to the heap
#else
constexpr bool kKeeps = true;
#endif

}  // namespace

TEST_CASE("block cache: a freed block serves the next allocation of its class",
          "[block_cache]") {
  if (!kKeeps) return;
  using sluice::block_cache::allocate;
  using sluice::block_cache::deallocate;
  // Sizes in one class share blocks: 100 and 120 bytes (128), 3,100 and 3,500 (3,584).
  for (const auto& [first, second] : {std::pair<std::size_t, std::size_t>{100, 120},
                                      {600, 1000},
                                      {3100, 3500},
                                      {4000, 4096}}) {
    INFO(first << " then " << second);
    void* block = allocate(first);
    deallocate(block, first);
    void* again = allocate(second);
    CHECK(again == block);
    deallocate(again, second);
  }
  // A block of another class is not handed out for it.
  void* small = allocate(64);
  deallocate(small, 64);
  void* large = allocate(2048);
  CHECK(large != small);
  deallocate(large, 2048);
}

TEST_CASE("block cache: a shared object made with the allocator comes from the cache",
          "[block_cache]") {
  if (!kKeeps) return;
  struct Big {
    char bytes[3000];
  };
  const Big* first = nullptr;
  {
    auto a = std::allocate_shared<Big>(sluice::BlockAllocator<Big>{});
    first = a.get();
  }
  auto b = std::allocate_shared<Big>(sluice::BlockAllocator<Big>{});
  CHECK(b.get() == first);
}
