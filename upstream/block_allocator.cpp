#include "upstream/block_allocator.hpp"

#include <array>
#include <cstdint>
#include <new>
#include <utility>

namespace sluice::block_cache {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kKeep = false;
#else
constexpr bool kKeep = true;
#endif

constexpr std::size_t kGrain = 64;       // size classes: 64, 128, ..., 512 bytes
constexpr std::size_t kClasses = 8;
// Bytes kept per class and thread: 1,024 blocks of 64 bytes down to 128 of
// 512, enough for the heads of a few hundred requests in flight on a worker.
constexpr std::size_t kBytesPerClass = 64 * 1024;

// The blocks kept of each class (no division on the path that frees).
constexpr auto kKeptPerClass = [] {
  std::array<std::uint32_t, kClasses> kept{};
  for (std::size_t c = 0; c < kClasses; ++c) {
    kept[c] = static_cast<std::uint32_t>(kBytesPerClass / ((c + 1) * kGrain));
  }
  return kept;
}();

struct FreeBlock {
  FreeBlock* next;
};

// This thread's freed blocks. Trivially destructible, so it lives as long as
// the thread: a block freed after the cleanup below ran (a static destroyed
// at exit) finds it closed and goes to the heap.
struct Lists {
  FreeBlock* head[kClasses];
  std::uint32_t count[kClasses];
  bool closed;
};

thread_local Lists lists{};

// Gives the kept blocks back to the heap when the thread ends; made (and its
// destructor registered) when the thread first keeps a block.
struct ListsCleanup {
  ~ListsCleanup() {
    lists.closed = true;
    for (FreeBlock*& block : lists.head) {
      while (block != nullptr) ::operator delete(std::exchange(block, block->next));
    }
  }
};

thread_local ListsCleanup cleanup;

// The size class of a block of `bytes` (> 0), kClasses or more when too large.
std::size_t size_class(std::size_t bytes) { return (bytes - 1) / kGrain; }

}  // namespace

void* allocate(std::size_t bytes) {
  const std::size_t c = size_class(bytes);
  if (!kKeep || c >= kClasses) return ::operator new(bytes);
  if (FreeBlock* block = lists.head[c]) {
    lists.head[c] = block->next;
    --lists.count[c];
    return block;
  }
  return ::operator new((c + 1) * kGrain);  // the whole class: any of its blocks fits
}

void deallocate(void* block, std::size_t bytes) noexcept {
  const std::size_t c = size_class(bytes);
  if (kKeep && c < kClasses && !lists.closed && lists.count[c] < kKeptPerClass[c]) {
    [[maybe_unused]] ListsCleanup* const registered = &cleanup;  // once per thread
    lists.head[c] = ::new (block) FreeBlock{lists.head[c]};
    ++lists.count[c];
    return;
  }
  ::operator delete(block);
}

}  // namespace sluice::block_cache
