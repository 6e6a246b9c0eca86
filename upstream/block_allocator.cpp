#include "upstream/block_allocator.hpp"

#include <array>
#include <cstdint>
#include <new>
#include <utility>

namespace sluice::block_cache {
namespace {

// Size classes: 64, 128, ..., 512 bytes (small), then 1,024, 1,536, ...,
// 4,096 (large: an HTTP/2 stream's state, nghttp2's larger records).
constexpr std::size_t kGrain = 64;
constexpr std::size_t kSmallClasses = 8;
constexpr std::size_t kLargeGrain = 512;
constexpr std::size_t kClasses = kSmallClasses + 7;
// Bytes kept per class and thread: 1,024 blocks of 64 bytes down to 128 of
// 512, enough for the heads of a few hundred requests in flight on a worker;
// 256 KiB of each large class (73 blocks of 3.5 KiB).
constexpr std::size_t kBytesPerSmallClass = 64 * 1024;
constexpr std::size_t kBytesPerLargeClass = 256 * 1024;

constexpr std::size_t class_bytes(std::size_t c) {
  return c < kSmallClasses ? (c + 1) * kGrain : (c - kSmallClasses + 2) * kLargeGrain;
}

// The blocks kept of each class (no division on the path that frees).
constexpr auto kKeptPerClass = [] {
  std::array<std::uint32_t, kClasses> kept{};
  for (std::size_t c = 0; c < kClasses; ++c) {
    const std::size_t bytes = c < kSmallClasses ? kBytesPerSmallClass : kBytesPerLargeClass;
    kept[c] = static_cast<std::uint32_t>(bytes / class_bytes(c));
  }
  return kept;
}();
static_assert(class_bytes(kClasses - 1) == kLargest);

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

// The size class of a block of `bytes` (> 0), kClasses when too large.
std::size_t size_class(std::size_t bytes) {
  if (bytes <= kSmallClasses * kGrain) return (bytes - 1) / kGrain;
  if (bytes <= kLargest) return kSmallClasses - 1 + (bytes - 1) / kLargeGrain;
  return kClasses;
}

}  // namespace

void* allocate(std::size_t bytes) {
  const std::size_t c = size_class(bytes);
  if (!kKeeps || c >= kClasses) return ::operator new(bytes);
  if (FreeBlock* block = lists.head[c]) {
    lists.head[c] = block->next;
    --lists.count[c];
    return block;
  }
  return ::operator new(class_bytes(c));  // the whole class: any of its blocks fits
}

void deallocate(void* block, std::size_t bytes) noexcept {
  const std::size_t c = size_class(bytes);
  if (kKeeps && c < kClasses && !lists.closed && lists.count[c] < kKeptPerClass[c]) {
    [[maybe_unused]] ListsCleanup* const registered = &cleanup;  // once per thread
    lists.head[c] = ::new (block) FreeBlock{lists.head[c]};
    ++lists.count[c];
    return;
  }
  ::operator delete(block);
}

}  // namespace sluice::block_cache
