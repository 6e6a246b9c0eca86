// The per-thread block cache: a freed block comes back for the next
// allocation of its size class, small (up to 512 bytes) and large (up to 4
// KiB: an HTTP/2 stream's state).
#include <catch2/catch.hpp>

#include <cstddef>
#include <memory>

#include "upstream/block_allocator.hpp"

using sluice::block_cache::kKeeps;

TEST_CASE("block cache: a freed block serves the next allocation of its class",
          "[block_cache]") {
  if (!kKeeps) return;
  using sluice::block_cache::allocate;
  using sluice::block_cache::deallocate;
  // Sizes in one class share blocks: 100 and 120 bytes (128), 3,100 and 3,500 (3,584).
  for (const auto& [first, second] : {std::pair<std::size_t, std::size_t>{100, 120},
                                      {449, 512},
                                      {513, 1024},
                                      {1025, 1536},
                                      {3100, 3500},
                                      {3585, 4096}}) {
    INFO(first << " then " << second);
    void* block = allocate(first);
    deallocate(block, first);
    void* again = allocate(second);
    CHECK(again == block);
    deallocate(again, second);
  }
  // Across a class boundary a freed block is not handed out: 512 and 513
  // bytes, 1,024 and 1,025, 4,096 and 4,097 (the heap's).
  for (const auto& [first, second] : {std::pair<std::size_t, std::size_t>{512, 513},
                                      {1024, 1025},
                                      {4096, 4097}}) {
    INFO(first << " then " << second);
    void* block = allocate(first);
    deallocate(block, first);
    void* other = allocate(second);
    CHECK(other != block);
    deallocate(other, second);
    CHECK(allocate(first) == block);  // still kept for its own class
    deallocate(block, first);
  }
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

TEST_CASE("block cache: a BlockMap's node freed is the next node made", "[block_cache]") {
  sluice::BlockMap<int, std::shared_ptr<int>> streams;
  streams.emplace(1, std::make_shared<int>(10));
  streams.emplace(3, std::make_shared<int>(30));
  const auto* first = &*streams.find(1);
  streams.erase(1);
  streams.emplace(5, std::make_shared<int>(50));
  CHECK(*streams.at(3) == 30);
  CHECK(*streams.at(5) == 50);
  CHECK(streams.size() == 2);
  if (kKeeps) CHECK(&*streams.find(5) == first);
}
