// The fields of every HTTP head Sluice parses or builds (requests and
// responses, both protocols, trailers), and where their memory comes from.
//
// Beast allocates each field on its own (a node with the name and value
// beside it) and frees it when the head is done with, so every request cost
// one malloc and free per field of its head and of its response's. The
// fields' allocator keeps freed blocks of up to 512 bytes in per-thread lists
// (64 per size class of 64 bytes, 144 KiB at most per thread) for the next
// head: a request on a warm worker allocates none. A block freed on another
// thread goes to that thread's lists. The allocator has no state, so any two
// heads' fields are the same type and may be copied, moved and swapped.
// Under AddressSanitizer nothing is kept, so a field used after its head is
// freed is still caught.
#pragma once

#include <cstddef>

#include <boost/beast/http/fields.hpp>

namespace sluice {

namespace field_blocks {
void* allocate(std::size_t bytes);
void deallocate(void* block, std::size_t bytes) noexcept;
}  // namespace field_blocks

template <class T>
class FieldAllocator {
 public:
  using value_type = T;

  FieldAllocator() noexcept = default;
  template <class U>
  FieldAllocator(const FieldAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) { return static_cast<T*>(field_blocks::allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { field_blocks::deallocate(p, n * sizeof(T)); }

  template <class U>
  friend bool operator==(const FieldAllocator&, const FieldAllocator<U>&) noexcept {
    return true;
  }
};

using HttpFields = boost::beast::http::basic_fields<FieldAllocator<char>>;

}  // namespace sluice
