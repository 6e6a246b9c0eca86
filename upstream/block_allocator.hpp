// A per-thread cache of small blocks, and the stateless allocator over it:
// for objects the request path makes and frees over and over (an HTTP
// head's fields, a Redis script call's record), which would otherwise cost a
// malloc and a free each time.
//
// Freed blocks of up to 512 bytes are kept in per-thread lists (64 KiB per
// size class of 64 bytes: 1,024 blocks of 64 bytes down to 128 of 512; 512
// KiB at most per thread) for the next allocation of their class; larger
// ones go to the heap. A block freed on another thread
// goes to that thread's lists. The allocator has no state, so containers that
// use it may be copied, moved and swapped freely. Under AddressSanitizer
// nothing is kept, so a block used after it is freed is still caught.
#pragma once

#include <cstddef>

namespace sluice {

namespace block_cache {
void* allocate(std::size_t bytes);
void deallocate(void* block, std::size_t bytes) noexcept;
}  // namespace block_cache

template <class T>
class BlockAllocator {
 public:
  using value_type = T;

  BlockAllocator() noexcept = default;
  template <class U>
  BlockAllocator(const BlockAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) { return static_cast<T*>(block_cache::allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { block_cache::deallocate(p, n * sizeof(T)); }

  template <class U>
  friend bool operator==(const BlockAllocator&, const BlockAllocator<U>&) noexcept {
    return true;
  }
};

}  // namespace sluice
