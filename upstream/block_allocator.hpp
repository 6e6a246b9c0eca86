// A per-thread cache of small blocks, and the stateless allocator over it:
// for objects the request path makes and frees over and over (an HTTP
// head's fields, a Redis script call's record), which would otherwise cost a
// malloc and a free each time.
//
// Freed blocks of up to 4 KiB are kept in per-thread lists for the next
// allocation of their class: up to 512 bytes in classes of 64 bytes (64 KiB
// each: 1,024 blocks of 64 bytes down to 128 of 512), then in classes of 512
// bytes (256 KiB each: an HTTP/2 stream's state is one block of 3.5 KiB); 2.25
// MiB at most per thread. Larger ones go to the heap (and a large block
// freed and allocated again by glibc would make it merge its lists of small
// free blocks each time). A block freed on another thread
// goes to that thread's lists. The allocator has no state, so containers that
// use it may be copied, moved and swapped freely. Under AddressSanitizer
// nothing is kept, so a block used after it is freed is still caught.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <utility>

namespace sluice {

namespace block_cache {
// Whether freed blocks are kept (not under AddressSanitizer).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kKeeps = false;
#else
inline constexpr bool kKeeps = true;
#endif
// The largest block kept; larger ones go to the heap.
inline constexpr std::size_t kLargest = 4096;
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

// An ordered map whose nodes come from the block cache: an HTTP/2
// connection's streams by id, one node made and freed per stream.
template <class Key, class Value>
using BlockMap = std::map<Key, Value, std::less<Key>, BlockAllocator<std::pair<const Key, Value>>>;

}  // namespace sluice
